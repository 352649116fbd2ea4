#!/usr/bin/env bash
# The multi-host tests under load (#42, #57): ROUNDS rounds of every `integration.hosts_*`
# test (`ctest -j 2`), then KILLED runs of hosts_fault_host_killed, each timed from the
# kill to mpirun's end, all beside a busy build (the emulated CUDA tree, rebuilt in a loop
# at normal priority). Writes OUT/rounds.txt and OUT/killed.txt.
#   bash bench/hosts_rounds.sh BUILD OUT [ROUNDS=5] [KILLED=20]
set -u
BUILD=$(realpath "$1")
OUT=$(realpath -m "$2")
ROUNDS=${3:-5}
KILLED=${4:-20}
SRC=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
BUSY=/tmp/hosts-rounds-busy
(
  while :; do
    rm -rf "$BUSY"
    cmake -S "$SRC" -B "$BUSY" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=EMULATE >/dev/null 2>&1
    cmake --build "$BUSY" -j 2 >/dev/null 2>&1
  done
) &
busy=$!
trap 'pkill -P $busy; kill $busy 2>/dev/null; pkill -f "$BUSY" 2>/dev/null; rm -rf "$BUSY"' EXIT
sleep 20 # the build under way
{
  echo "# $(date -u +%FT%TZ), $(git -C "$SRC" rev-parse --short HEAD), $(nproc) cores, beside a busy build"
  for i in $(seq "$ROUNDS"); do
    echo "## round $i, load $(cut -d' ' -f1 /proc/loadavg)"
    (cd "$BUILD" && ctest -R 'hosts_' -j 2 --timeout 900 2>&1 | grep -E "Test +#|tests passed|tests failed")
  done
} >"$OUT/rounds.txt"
{
  echo "# $(date -u +%FT%TZ), hosts_fault_host_killed x $KILLED beside a busy build: seconds from the kill of h2 to mpirun's end"
  for i in $(seq "$KILLED"); do
    line=$(cd "$BUILD" && ctest -R 'hosts_fault_host_killed' -V --timeout 900 2>&1 | grep -E "h2 killed: mpirun ended|Passed|Failed" | tr '\n' ' ')
    echo "$i load $(cut -d' ' -f1 /proc/loadavg): $line"
  done
} >"$OUT/killed.txt"
