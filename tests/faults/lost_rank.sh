# A rank that stops answering or dies under `mpirun -np 4` (docs/lost-ranks.md).
#   1. SIGSTOP of rank 2 mid-sweep: rank 0 declares it lost after --rank-timeout-s of
#      silence, hands its cell to the others; SIGCONT then wakes it, and the result it
#      sends late is ignored; every cell completes once, and mpirun exits 75 naming the
#      rank and its host; events.jsonl, status.json and `attnsweep status` show the lost
#      rank; the rerun has nothing left to do, and removes what a rank killed mid-write
#      leaves (a temporary result, a half-written checkpoint).
#   2. SIGKILL of rank 2: Open MPI 4.1's mpirun aborts the whole job (exit 137); the
#      rerun completes the rest. The cells lost to the abort are counted and printed.
# No cell is counted twice, and every file under runs/ is a valid result, in both.
source "$(dirname "$0")/../integration/lib.bash"
command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
TIMEOUT=5  # --rank-timeout-s: heartbeats every 0.625 s
grid() {  # grid FILE CELLS LONG: that many cells of 0.5 s, and LONG more of 6.5 s
  $PY -c "import json; json.dump({'name': 'lost-rank', 'axes': {'task': ['synthetic'], 'seed': list(range($2))},
                                  'fixed': {'seconds': 0.5},
                                  'include': [{'task': 'synthetic', 'seed': 1000 + i, 'seconds': 6.5}
                                              for i in range($3)]}, open('$1', 'w'))"
}
# rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun), once it runs.
rank_pid() {
  local p r
  for p in $(pgrep -P "$1"); do
    r=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    if [ "$r" = "$2" ]; then echo "$p"; return; fi
  done
}
# start_and_signal DIR SIGNAL: starts the sweep, waits for 8 results, signals rank 2.
# A watchdog kills mpirun after 90 s (a rank 0 that never notices would wait for ever).
start_and_signal() {
  mpirun -np 4 "$ATTNSWEEP" run grid.json --out "$1" --workers 1 --rank-timeout-s $TIMEOUT \
    >"$1.stdout" 2>"$1.stderr" &
  MPIRUN=$!
  (sleep 90; kill -KILL $MPIRUN 2>/dev/null) >/dev/null 2>&1 &
  WATCHDOG=$!
  for _ in $(seq 300); do
    [ "$(ls "$1"/runs/*.h5 2>/dev/null | wc -l)" -ge 8 ] && break
    sleep 0.1
  done
  VICTIM=$(rank_pid $MPIRUN 2)
  test -n "$VICTIM" || fail "no rank 2 under mpirun $MPIRUN"
  kill -"$2" "$VICTIM"
  echo "SIG$2 to rank 2 (pid $VICTIM) with $(ls "$1"/runs/*.h5 | wc -l) of $CELLS cells done"
}
stop_watchdog() {  # the watchdog and its sleep
  kill $(pgrep -P $WATCHDOG) $WATCHDOG 2>/dev/null || true
}
# finished_once DIR: every cell finished exactly once over all runs into DIR.
finished_once() {
  $PY - "$1/events.jsonl" $CELLS <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
assert len(fin) == int(sys.argv[2]), f"{len(fin)} cells finished, expected {sys.argv[2]}"
assert max(fin.values()) == 1, [c for c, n in fin.items() if n > 1]
PY
}

# ---- 1. SIGSTOP: noticed, its cell reassigned, the run finishes and exits 75 -----------
# Three cells longer than the rank timeout: a healthy rank running one stays alive
# (its heartbeat thread speaks while its main loop has nothing to say).
CELLS=51
grid grid.json 48 3
start_and_signal stop STOP
# Once rank 0 has declared it lost, and the child it was waiting for has ended, wake
# it: the result it then sends comes too late.
for _ in $(seq 600); do
  grep -q '"rank_lost"' stop/events.jsonl && break
  sleep 0.1
done
for _ in $(seq 100); do
  test -z "$(ps -o stat= --ppid "$VICTIM" | grep -v Z || true)" && break
  sleep 0.1
done
kill -CONT "$VICTIM"
set +e; wait $MPIRUN; RC=$?; set -e
stop_watchdog
kill -KILL "$VICTIM" 2>/dev/null || true
grep attnsweep stop.stderr | tail -3
check "mpirun exits 75 after losing a rank (got $RC)" test "$RC" = 75
check "the message names rank 2 and its host" grep -q "rank 2 on host $(hostname) was lost" stop.stderr
check "every cell completed, each finished once, rank 2 lost after $TIMEOUT s of silence" \
  $PY - stop/events.jsonl $CELLS $TIMEOUT <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n, timeout = int(sys.argv[2]), float(sys.argv[3])
lost = [e for e in ev if e["event"] == "rank_lost"]
assert len(lost) == 1 and lost[0]["rank"] == 2, lost  # only rank 2: none of the healthy ones
# The liveness timeout itself, with a generous margin above it (a loaded machine).
assert timeout <= lost[0]["silent_s"] < timeout + 30, lost[0]
at = ev.index(lost[0])
assert not [e for e in ev[at:] if e["event"] == "finished" and e["rank"] == 2], "a result of the lost rank counted"
re = [e["cell_id"] for e in ev if e["event"] == "reassigned"]
assert sorted(re) == sorted(lost[0]["cells"]), (re, lost[0]["cells"])
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
assert len(fin) == n and max(fin.values()) == 1, (len(fin), fin.most_common(1))
for c in re:  # a reassigned cell finished on another rank
    assert [e["rank"] for e in ev if e["event"] == "finished" and e["cell_id"] == c] != [2], c
# Woken by SIGCONT, rank 2 reports the cell it held: ignored, not counted.
late = [e for e in ev[at:] if e["event"] == "ignored_result"]
print("late results ignored:", [(e["cell_id"], e["rank"], e["reason"]) for e in late])
if lost[0]["cells"]:
    assert [e["cell_id"] for e in late if e["rank"] == 2] == lost[0]["cells"], late
end = [e for e in ev if e["event"] == "sweep_finished"][-1]
assert end["exit_code"] == 75 and end["complete"] == n and [l["rank"] for l in end["lost_ranks"]] == [2], end
print(f"rank 2 lost after {lost[0]['silent_s']:.1f} s of silence; reassigned: {re}")
PY
check "status.json lists the lost rank" $PY -c "
import json; st = json.load(open('stop/status.json'))
assert st['state'] == 'lost_ranks' and [l['rank'] for l in st['lost_ranks']] == [2], st"
run_rc "$ATTNSWEEP" status stop
check "attnsweep status shows the lost rank" grep -q "lost rank 2 on host $(hostname)" .stdout
sleep 1
check "no process of the first run is left" test -z "$(pgrep -f "$ATTNSWEEP (run|train)" || true)"
check "every file under runs/ is valid" results_valid stop
# What a rank killed mid-write leaves: a temporary result and a half-written checkpoint.
cells=(stop/cells/*.json); id=$(basename "${cells[0]}" .json)
echo partial > stop/runs/$id.h5.tmp.999999
echo partial > stop/checkpoints/$id.ckpt.tmp.999999
run_rc mpirun -np 4 "$ATTNSWEEP" run grid.json --out stop --workers 1 --rank-timeout-s $TIMEOUT
check "the rerun exits 0 (got $RC)" test "$RC" = 0
check "the rerun removed the temporary result and checkpoint" \
  test ! -e stop/runs/$id.h5.tmp.999999 -a ! -e stop/checkpoints/$id.ckpt.tmp.999999
check "the rerun has nothing left to start" test "$(count_events stop started)" = 0
check "$CELLS result files" test "$(ls stop/runs/*.h5 | wc -l)" = $CELLS

# ---- 2. SIGKILL: mpirun aborts the job; the rerun completes the rest ---------------------
CELLS=40
grid grid.json $CELLS 0
t0=$(date +%s.%N)
start_and_signal kill KILL
set +e; wait $MPIRUN; RC=$?; set -e
stop_watchdog
t1=$(date +%s.%N)
echo "mpirun exit code after SIGKILL of a rank: $RC"
check "mpirun does not exit 0 when a rank is killed (got $RC)" test "$RC" != 0
sleep 1
check "no process of the killed run is left" test -z "$(pgrep -f "$ATTNSWEEP (run|train)" || true)"
check "every file under runs/ is valid after the abort (or a killed writer's temporary)" results_valid kill killed
done1=$(ls kill/runs/*.h5 | wc -l)
run_rc mpirun -np 4 "$ATTNSWEEP" run grid.json --out kill --workers 1 --rank-timeout-s $TIMEOUT
t2=$(date +%s.%N)
check "the rerun exits 0 (got $RC)" test "$RC" = 0
check "$CELLS result files after the rerun" test "$(ls kill/runs/*.h5 | wc -l)" = $CELLS
check "the rerun started only the $((CELLS - done1)) unfinished cells" test "$(count_events kill started)" = $((CELLS - done1))
check "no cell counted twice over the two runs" finished_once kill
$PY - kill/events.jsonl "$t0" "$t1" "$t2" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
first = ev[:[i for i, e in enumerate(ev) if e["event"] == "sweep_started"][1]]
started = {(e["cell_id"], e["attempt"]) for e in first if e["event"] == "started"}
finished = {(e["cell_id"], e["attempt"]) for e in first if e["event"] in ("finished", "failed")}
t0, t1, t2 = map(float, sys.argv[2:])
print(f"SIGKILL of one rank: the job aborted {t1 - t0:.1f} s after start; {len(started - finished)} attempts in flight "
      f"lost (0.5 s cells), {len(finished)} cells kept; the rerun took {t2 - t1:.1f} s")
PY
