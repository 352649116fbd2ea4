# `attnsweep status DIR` while a sweep runs and after it ended: counts (done / failed /
# running / pending), throughput and ETA while running, the failed cell with the last
# lines of its log, `--json` for scripts; a directory that is not a sweep is exit 2.
source "$(dirname "$0")/lib.bash"
cat > grid.json <<'JSON'
{"name": "status-demo",
 "axes": {"task": ["synthetic"], "seed": [0, 1, 2, 3, 4, 5]},
 "fixed": {"seconds": 1.0},
 "include": [{"task": "synthetic", "seed": 99, "crash_attempts": 99}],
 "resources": {"retries": 0}}
JSON
# status --json DIR FIELD...: prints the fields, space-separated
field() {
  local dir=$1; shift
  "$ATTNSWEEP" status "$dir" --json | $PY -c 'import json, sys; d = json.load(sys.stdin); print(" ".join(json.dumps(d[k]) for k in sys.argv[1:]))' "$@"
}

run_rc "$ATTNSWEEP" status out
check "status before any run: exit 2 ($ERR)" test "$RC" = 2
check "and says why" grep -q "no manifest.json" <<<"$ERR"

# One slot, seven cells of about a second: the sweep runs for several seconds.
"$ATTNSWEEP" run grid.json --out out --workers 1 >run.out 2>run.err &
pid=$!
seen=""
for _ in $(seq 1 150); do
  sleep 0.2
  [ -e out/status.json ] || continue
  read -r state complete running pending total eta < <(field out state complete running pending total eta_s) || continue
  if [ "$state" = '"running"' ] && [ "$complete" -ge 1 ] && [ "$pending" -ge 1 ] && [ "$eta" != null ]; then
    seen="$state $complete $running $pending $total $eta"
    "$ATTNSWEEP" status out > running.txt
    break
  fi
done
echo "while running: state complete running pending total eta = $seen"
cat running.txt || true
check "status --json saw the sweep running, with some cells done and some pending" test -n "$seen"
read -r state complete running pending total eta <<<"$seen"
check "running: one cell running on the one slot" test "$running" = 1
check "running: total is the 7 cells" test "$total" = 7
check "running: counts add up (complete + running + pending <= 7)" test $((complete + running + pending)) -le 7
check "running: an ETA in seconds" $PY -c "assert float('$eta') > 0"
check "running: the text names the state" grep -q "status-demo, running" running.txt
check "running: the text gives throughput and ETA" grep -Eq "[0-9.]+ cells/s, ETA [0-9]+ s" running.txt

set +e; wait $pid; rc=$?; set -e
check "the sweep exits 1 (one cell failed; got $rc)" test "$rc" = 1

run_rc "$ATTNSWEEP" status out
echo "$OUT"
check "finished: status exits 0" test "$RC" = 0
check "finished: state and counts" grep -q "7 cells: 6 complete, 0 diverged, 1 failed, 0 running, 0 pending" <<<"$OUT"
check "finished: the text names the state" grep -q "status-demo, finished" <<<"$OUT"
check "finished: the failed cell with its swept keys and its reason" \
  grep -Eq "^  failed [0-9a-f]+ \(crash_attempts=99 seed=99\): " <<<"$OUT"
check "run's failure line names the cell's swept keys" \
  grep -Eq "^attnsweep: cell [0-9a-f]+ \(crash_attempts=99 seed=99\) failed after 1 attempt: " run.err
check "finished: the last lines of its log" grep -q "^    | " <<<"$OUT"
check "finished: no ETA once ended" bash -c "! grep -q ETA <<<\"\$1\"" _ "$OUT"
check "finished: --json" $PY - <<PY
import json, subprocess
d = json.loads(subprocess.run(["$ATTNSWEEP", "status", "out", "--json"], capture_output=True, check=True, text=True).stdout)
assert d["state"] == "finished" and d["total"] == 7 and d["complete"] == 6 and d["failed"] == 1, d
assert d["running"] == 0 and d["pending"] == 0 and d["eta_s"] is None, d
assert d["rate_cells_per_s"] > 0, d
(f,) = d["failed_cells"]
assert f["cell_id"] and "reason" in f, f
assert f["swept"] == {"crash_attempts": 99, "seed": 99}, f
print("   ", {k: d[k] for k in ("state", "complete", "failed", "rate_cells_per_s")})
PY
run_rc "$ATTNSWEEP" report out
check "report exits 0 ($ERR)" test "$RC" = 0
check "the report's failed cell is named by its swept keys" \
  grep -Eq "<li>[0-9a-f]+ \(crash_attempts=99 seed=99\): " out/report.html

# Elapsed time over every run of the directory (#52): a second run adds its time to the
# first's; `status --json` passes on status.json's own fields (it only adds to them).
cat > two.json <<'J'
{"axes": {"task": ["synthetic"], "seed": [0, 1]}, "fixed": {"seconds": 1}}
J
"$ATTNSWEEP" run two.json --out t2 --workers 1 >/dev/null 2>&1
first=$($PY -c "import json; print(json.load(open('t2/status.json'))['elapsed_total_s'])")
"$ATTNSWEEP" run two.json --out t2 --workers 1 >/dev/null 2>&1
check "status --json: the run's own fields and the elapsed time over both runs" $PY - "$first" <<PY
import json, subprocess, sys
first = float(sys.argv[1])
d = json.loads(subprocess.run(["$ATTNSWEEP", "status", "t2", "--json"], capture_output=True, check=True, text=True).stdout)
for k in ("elapsed_s", "elapsed_total_s", "started", "updated", "host", "pid", "ranks", "done_before_this_run"):
    assert k in d, (k, sorted(d))
assert first >= 2.0, first  # two 1-s cells, one slot
assert d["elapsed_total_s"] >= first + d["elapsed_s"] - 1e-6 and d["done_before_this_run"] == 2, d
print("    elapsed", d["elapsed_s"], "total", d["elapsed_total_s"])
PY
"$ATTNSWEEP" status t2 >t2.txt
check "status's text says the elapsed time" grep -Eq "^  elapsed [0-9]+:[0-9]{2}:[0-9]{2} over every run" t2.txt
