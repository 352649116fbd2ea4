#!/usr/bin/env bash
# A host cut off: h2's link to the switch goes down mid-sweep (its orted, ranks and
# children stay alive, no traffic passes). Rank 0 hears no heartbeat from h2's two ranks,
# declares both lost after --rank-timeout-s, hands their cells to h1 and h3, and every
# cell completes. The link then comes back: h2's late results are ignored, mpirun ends
# the job and exits 75 (resumable), naming both ranks and h2; the rerun starts nothing
# and every cell was finished exactly once. HOSTS_UNHANDLED=1 leaves out the handling
# (lost-rank detection: a rank timeout of 10^5 s) to see the test fail.
# shellcheck source=mpi_test.bash
source "$(cd "$(dirname "$0")" && pwd)/mpi_test.bash"
mpi_hosts_up 3
CELLS=40
TIMEOUT=5
[ "${HOSTS_UNHANDLED:-0}" = 1 ] && TIMEOUT=100000
grid_synthetic grid.json $CELLS 0.5
start_sweep out --rank-timeout-s $TIMEOUT
wait_results out 8
before=$(results out)
tc=$(date +%s.%N)
host_cut h2
echo "h2 cut off (link down) with $before of $CELLS cells done"
lost=
for _ in $(seq 300); do
  [ "$(grep -c '"rank_lost"' out/events.jsonl)" -ge 2 ] && { lost=$(date +%s.%N); break; }
  sleep 0.1
done
check "rank 0 declared h2's two ranks lost within 30 s of the cut" test -n "$lost"
check "h2's processes are alive meanwhile" test -n "$(host_pids h2)"
# Every cell is done on h1 and h3 before the link comes back.
for _ in $(seq 300); do
  grep -q '"sweep_finished"' out/events.jsonl && break
  sleep 0.1
done
check "the sweep finished without h2" grep -q '"sweep_finished"' out/events.jsonl
host_mend h2
tm=$(date +%s.%N)
echo "h2 back (link up) $(elapsed "$tc" "$tm") s after the cut"
wait_sweep 60
t1=$(date +%s.%N)
grep "attnsweep" out.stderr | tail -3 || true
check "mpirun exits 75 (got $RC)" test "$RC" = 75
check "the message names both ranks and h2" \
  test "$(grep -cE "attnsweep: rank [23] on host h2 was lost" out.stderr)" = 2
check "events: ranks 2 and 3 on h2 lost, their cells reassigned and finished elsewhere" \
  $PY - out/events.jsonl $CELLS $TIMEOUT <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n, timeout = int(sys.argv[2]), float(sys.argv[3])
lost = [e for e in ev if e["event"] == "rank_lost"]
assert sorted(e["rank"] for e in lost) == [2, 3] and {e["host"] for e in lost} == {"h2"}, lost
assert all(timeout <= e["silent_s"] < timeout + 30 for e in lost), lost
at = min(ev.index(e) for e in lost)
assert not [e for e in ev[at:] if e["event"] == "finished" and e["host"] == "h2"], "a result of h2 counted after the loss"
held = sorted(c for e in lost for c in e["cells"])
assert sorted(e["cell_id"] for e in ev if e["event"] == "reassigned") == held
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
assert len(fin) == n and max(fin.values()) == 1, (len(fin), fin.most_common(1))
end = [e for e in ev if e["event"] == "sweep_finished"][-1]
assert end["exit_code"] == 75 and end["complete"] == n, end
print(f"lost after {[round(e['silent_s'], 1) for e in lost]} s of silence; {len(held)} cells reassigned")
PY
check "status.json says lost_ranks" grep -q '"state": "lost_ranks"' out/status.json
run_rc mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1 --rank-timeout-s $TIMEOUT
check "the rerun exits 0 (got $RC) and starts nothing" test "$RC" = 0 -a "$(count_events out started)" = 0
check "every cell finished exactly once, every file valid" valid_and_once out $CELLS
echo "h2 cut off: lost $(elapsed "$tc" "$lost") s after the cut (--rank-timeout-s $TIMEOUT); every cell done $(elapsed "$tc" "$tm") s after it; mpirun exited 75 $(elapsed "$tm" "$t1") s after the link came back"
