#!/usr/bin/env bash
# A run directory that is not shared: mpirun over 3 hosts where h3 sees an empty private
# tmpfs at DIR (a mount namespace of its orted's own), as on a node whose --out is a
# local disk. `run` checks at start that every rank reads the token file rank 0 wrote
# into DIR, exits 2 naming h3 and its ranks, and no cell runs anywhere. The same run with
# DIR seen by every host passes the check (tests/hosts/mpi.sh runs a whole grid so).
# shellcheck source=mpi_test.bash
source "$(cd "$(dirname "$0")" && pwd)/mpi_test.bash"
mpi_hosts_up 3
grid_synthetic grid.json 6 0.1
mkdir out  # the mount point of h3's private tmpfs
HOSTS_PRIVATE_HOST=h3 HOSTS_PRIVATE_DIR=$WORK/out mpi_agent "$WORK/agent"
t0=$(date +%s.%N)
run_rc mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1
t1=$(date +%s.%N)
echo "$ERR" | grep "attnsweep run" || true
check "the run exits 2 (got $RC)" test "$RC" = 2
check "the message names h3 and its ranks, and says what to do" \
  grep -q "is not the same directory on every rank: the host h3 (ranks 4, 5: no such file) does not see out/.attnsweep-shared-" <<<"$ERR"
check "... and the file system to use" grep -q "put --out on a file system that every node mounts" <<<"$ERR"
check "h1 and h2 are not named" bash -c '! grep -qE "host(s)? h[12] " <<<"$1"' - "$ERR"
check "no cell ran: no result, no start event" test -z "$(ls out/runs 2>/dev/null)" -a ! -s out/events.jsonl
check "the token file was removed" test -z "$(find out -maxdepth 1 -name '.attnsweep-shared-*')"
echo "the check and the exit took $(elapsed "$t0" "$t1") s (3 s of it: h3 retrying the read)"
# Every host sees DIR: the same command runs the grid.
mpi_agent "$WORK/agent"
run_rc mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1
check "with DIR shared the same run exits 0 (got $RC)" test "$RC" = 0
check "6 result files" test "$(ls out/runs/*.h5 | wc -l)" = 6
