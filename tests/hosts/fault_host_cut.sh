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
closes_after_losses out $CELLS $TIMEOUT 30 "2 3" h2 \
  mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1 --rank-timeout-s $TIMEOUT
echo "h2 cut off: lost $(elapsed "$tc" "$lost") s after the cut (--rank-timeout-s $TIMEOUT); every cell done $(elapsed "$tc" "$tm") s after it; mpirun exited 75 $(elapsed "$tm" "$t1") s after the link came back"
