#!/usr/bin/env bash
# Paper A's three grids on the CPU, in the background (issue #41): resumable, so every
# session reruns this same command and `run` skips finished cells. Results go to
# $RUNS (default /work/runs-paperA, outside the checkout); summary.sh copies the growing
# summaries here.
#   nice -n 19 bash bench/results/cpu-paperA/run.sh > /work/runs-paperA/log.txt 2>&1 &
set -u
cd "$(dirname "$0")/../../.."
BIN=${ATTNSWEEP_BIN:-/work/build-cpu/attnsweep}
RUNS=${RUNS:-/work/runs-paperA}
mkdir -p "$RUNS"
for g in paperA_fmnist paperA_scale_sweep paperA_pde; do
  echo "== $g start $(date -u +%FT%TZ)"
  /usr/bin/time -f "$g wall %e s" "$BIN" run experiments/grids/$g.json --out "$RUNS/$g" --workers 2 --threads 1
  echo "== $g exit $? $(date -u +%FT%TZ)"
done
