#!/usr/bin/env bash
# Hosts that freeze instead of dying (every process SIGSTOPped: an NFS hang, a swapping
# node): TCP stays open and nothing errors. 4 cells of 12 s on 6 slots over 3 hosts, so
# two ranks sit idle with a request for work outstanding at rank 0. Y, a host other than
# h1 running cells, freezes; 1.5 s later X, the other one, where an idle rank waits. When
# rank 0 declares Y's ranks lost, it hands their cells to X's idle rank: the assignment
# cannot be delivered to a stopped process (the TCP eager limit is set to 64 bytes, so an
# assignment waits for its receiver, as any message over 64 KiB does by default). Rank 0
# must not wait on it: it declares X's ranks lost in turn, within the rank timeout plus a
# margin, the cells run on h1, and the sweep finishes. The hosts are then thawed: their
# late messages are ignored, mpirun exits 75, the rerun starts nothing and every cell was
# finished exactly once. With the blocking sends of before, rank 0 hung in the send to X
# and never declared it lost (seen failing). HOST_FAULT=drop leaves the processes running
# and drops every packet of the two hosts' links instead (host_drop: the links stay up, no
# connection is reset, TCP retransmits into the void; Y's cells end and their results
# arrive after the loss), then passes them again.
# shellcheck source=mpi_test.bash
source "$(cd "$(dirname "$0")" && pwd)/mpi_test.bash"
mpi_hosts_up 3
CELLS=4
TIMEOUT=4
MARGIN=10 # seconds beyond the timeout for the check's interval and a loaded machine
MPIRUN_ARGS=(--mca btl_tcp_eager_limit 64 --mca btl_tcp_rndv_eager_limit 64)
FAULT=${HOST_FAULT:-freeze}
stop=host_freeze resume=host_thaw
[ "$FAULT" = drop ] && stop=host_drop resume=host_undrop
grid_synthetic grid.json $CELLS 12
start_sweep out --rank-timeout-s $TIMEOUT
for _ in $(seq 300); do
  n=$(count_events out started 2>/dev/null || true)
  [ "${n:-0}" -ge $CELLS ] && break
  sleep 0.1
done
check "the $CELLS cells started" test "$(count_events out started)" -ge $CELLS
sleep 0.5 # the idle ranks' requests reach rank 0
# Which hosts run cells: rank r is on h$((r / 2 + 1)) (2 slots per host, in hostfile order).
read -r X Y < <($PY - out/events.jsonl <<'PY'
import json, sys
busy = {e["rank"] for e in map(json.loads, open(sys.argv[1])) if e["event"] == "started"}
idle = [r for r in range(2, 6) if r not in busy]  # rank 0 always runs one; rank 1 may idle
x = idle[-1] // 2 + 1
print(f"h{x} h{5 - x}")
PY
)
ty=$(date +%s.%N)
$stop "$Y"
sleep 1.5
tx=$(date +%s.%N)
$stop "$X"
echo "$Y (running cells) cut off ($FAULT), then $X (an idle rank waiting for work) 1.5 s later"
lost=
for _ in $(seq $(((TIMEOUT + MARGIN) * 10 + 15))); do
  [ "$(grep -c '"rank_lost"' out/events.jsonl)" -ge 4 ] && { lost=$(date +%s.%N); break; }
  sleep 0.1
done
check "rank 0 declared the 4 ranks of $Y and $X lost within $((TIMEOUT + MARGIN)) s of $X's fault" test -n "$lost"
check "a cell of $Y went to $X's idle rank after $Y was lost (what this test is about)" \
  $PY - out/events.jsonl "$X" <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
x_ranks = {2 * (int(sys.argv[2][1:]) - 1), 2 * (int(sys.argv[2][1:]) - 1) + 1}
first_loss = next(i for i, e in enumerate(ev) if e["event"] == "rank_lost")
to_x = [e for e in ev[first_loss:] if e["event"] == "started" and e["rank"] in x_ranks]
assert to_x, "no cell was handed to a rank of the idle frozen host"
print(f"{len(to_x)} cell(s) handed to a frozen rank of {sys.argv[2]}")
PY
for _ in $(seq 600); do
  grep -q '"sweep_finished"' out/events.jsonl && break
  sleep 0.1
done
check "the sweep finished on h1 without $Y and $X ($FAULT)" grep -q '"sweep_finished"' out/events.jsonl
# Frozen, they are still there; with drops, mpirun (told of rank 0's exit) has already
# ended them: the harness's "ssh" makes each orted a child of mpirun, which a real ssh does not.
[ "$FAULT" = freeze ] && check "the processes of $Y and $X are still there" test -n "$(host_pids "$X")" -a -n "$(host_pids "$Y")"
$resume "$Y"
$resume "$X"
tt=$(date +%s.%N)
wait_sweep 60
t1=$(date +%s.%N)
grep "attnsweep" out.stderr | tail -4 || true
check "mpirun exits 75 once the hosts are back (got $RC)" test "$RC" = 75
closes_after_losses out $CELLS $TIMEOUT $MARGIN "2 3 4 5" "h2 h3" \
  mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1 --rank-timeout-s $TIMEOUT
echo "$FAULT: $Y at 0 s, $X at $(elapsed "$ty" "$tx") s; all 4 ranks lost at $(elapsed "$ty" "$lost") s; back at $(elapsed "$ty" "$tt") s; mpirun exited 75 $(elapsed "$tt" "$t1") s after the thaw"
