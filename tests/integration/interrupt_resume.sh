# SIGTERM (as Slurm sends before preemption) stops a run: no new cells, children are
# told to stop, the run exits 75; the next run resumes and finishes every cell once.
source "$(dirname "$0")/lib.bash"
cat > grid.json <<'JSON'
{"name": "interrupt", "axes": {"task": ["synthetic"], "seed": [0,1,2,3,4,5,6,7,8,9,10,11]}, "fixed": {"seconds": 2.0}}
JSON
"$ATTNSWEEP" run grid.json --out out --workers 2 2>err.txt &
pid=$!
# Stopped 1 s after a third cell started: two cells are done and two are half-way through
# their 2 s, whatever the machine's speed (a fixed 2.5 s after the start caught none
# mid-way under ASan, where the first four cells took 2.4 s). At most 120 s.
for _ in $(seq 1200); do
  [ -f out/events.jsonl ] && [ "$(grep -c '"started"' out/events.jsonl)" -ge 3 ] && break
  sleep 0.1
done
sleep 1
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
cat err.txt
check "interrupted run exits 75 (got $rc)" test "$rc" = 75
done1=$(ls out/runs/*.h5 2>/dev/null | wc -l)
check "some but not all cells done ($done1)" test "$done1" -gt 0 -a "$done1" -lt 12
check "status.json says interrupted" grep -q '"state": "interrupted"' out/status.json
check "no temporary result file left" test -z "$(ls out/runs | grep -v '\.h5$' || true)"
check "the lock was released" "$ATTNSWEEP" status out
run_rc "$ATTNSWEEP" run grid.json --out out --workers 2
check "resumed run exits 0" test "$RC" = 0
check "12 result files" test "$(ls out/runs/*.h5 | wc -l)" = 12
check "resume ran only the unfinished cells" test "$(count_events out started)" = $((12 - done1))
check "no cell finished twice" $PY - out/events.jsonl <<'PY'
import collections, json, sys
fin = collections.Counter(json.loads(l)["cell_id"] for l in open(sys.argv[1]) if '"finished"' in l)
assert len(fin) == 12 and max(fin.values()) == 1, fin
PY
# A cell stopped mid-way and run again counts both attempts: wall_seconds is their sum,
# started the first one's; the last attempt's own time is kept beside them.
check "a resumed cell's wall_seconds and started count its interrupted attempt too" $PY - out <<'PY'
import glob, json, h5py, sys
d = sys.argv[1]
stopped = {json.loads(l)["cell_id"] for l in open(d + "/events.jsonl") if '"preempted"' in l}
assert stopped, "no cell was stopped mid-way"
for f in glob.glob(d + "/runs/*.h5"):
    with h5py.File(f) as h:
        a = dict(h.attrs)
    total, last, n = a["wall_seconds"], a["last_attempt_wall_seconds"], a["attempts"]
    if a["cell_id"] in stopped:
        assert n == 2 and total > last > 0 and a["started"] <= a["last_attempt_started"], (f, a)
    else:
        assert n == 1 and total == last and a["started"] == a["last_attempt_started"], (f, a)
print(f"    {len(stopped)} cells stopped and resumed: their time counts both attempts")
PY
check "no attempt-time file left once the results are written" test -z "$(ls out/checkpoints)"

# A second run on the same directory while one is running is refused, naming the holder.
"$ATTNSWEEP" run grid.json --out busy --workers 1 2>/dev/null &
pid=$!
sleep 0.5
run_rc "$ATTNSWEEP" run grid.json --out busy --workers 1
kill -TERM $pid; wait $pid || true
check "a concurrent run on one directory exits 2" test "$RC" = 2
check "and names the pid holding it ($ERR)" grep -q "pid $pid" <<<"$ERR"

# A resume with a changed grid is refused without --force.
sed 's/"seconds": 2.0/"seconds": 0.01/' grid.json > changed.json
run_rc "$ATTNSWEEP" run changed.json --out out --workers 2
check "changed grid refused with exit 2" test "$RC" = 2
check "the message says to use --force ($ERR)" grep -q -- "--force" <<<"$ERR"
run_rc "$ATTNSWEEP" run changed.json --out out --workers 2 --force
check "changed grid accepted with --force" test "$RC" = 0

# A grid shrunk with --force: status, aggregate (and so report) count only its cells; the
# dropped cells' result files stay in runs/, named as not counted.
sed 's/"seed": \[[0-9,]*\]/"seed": [0,1,2,3]/' changed.json > shrunk.json
run_rc "$ATTNSWEEP" run shrunk.json --out out --workers 2 --force
check "the shrunk grid runs nothing new (its 4 cells are done; rc $RC)" test "$RC" = 0
check "24 result files stay in runs/" test "$(ls out/runs/*.h5 | wc -l)" = 24
run_rc "$ATTNSWEEP" status out
echo "$OUT"
check "status counts only the shrunk grid's cells" grep -q "4 cells: 4 complete, 0 diverged, 0 failed" <<<"$OUT"
check "status names the files it does not count" \
  grep -q "20 result files in runs/ of cells no longer in the grid" <<<"$OUT"
run_rc "$ATTNSWEEP" aggregate out
echo "$ERR"
check "aggregate exits 0" test "$RC" = 0
check "summary.csv holds the shrunk grid's 4 cells" test "$(($(wc -l <out/summary.csv) - 1))" = 4
check "aggregate says which files it left out" grep -q "left out 20 result files of cells no longer in the grid" <<<"$ERR"
