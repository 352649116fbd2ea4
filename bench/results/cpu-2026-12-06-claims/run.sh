#!/usr/bin/env bash
# The decisive reruns of issue #51, claims declared in each grid before its run, on the
# CPU in the background; resumable: every session reruns this same command and `run`
# skips finished cells (checkpoints every 250 steps resume a stopped cell mid-way).
#   nice -n 19 bash bench/results/cpu-2026-12-06-claims/run.sh >> /work/runs-claims/log.txt 2>&1 &
# In priority order: paper B's concentration at init (25 CPU-slot s), the equivalence at
# 1000 steps, paper B's trained models (L 640, their weights kept) and their concentration
# (put before the norms on 2026-12-06: 15 min where the norms take hours), the norms under
# two schedules, c*(N) at N 16 and 49, the equivalence at 3000 steps.
# summary.sh copies each grid's summary and verdicts here.
set -u
cd "$(dirname "$0")/../../.."
BIN=${ATTNSWEEP_BIN:-/work/attnsweep-bg}
RUNS=${RUNS:-/work/runs-claims}
HERE=bench/results/cpu-2026-12-06-claims
mkdir -p "$RUNS"
for g in paperB_concentration paperA_equiv_n49 paperB_trained_640 paperB_trained_concentration paperA_norms_schedule \
         paperA_cstar paperA_equiv_n49_3000; do
  if [ "$g" = paperB_trained_concentration ]; then
    # The trained read-outs' weights, committed, are what the evaluation grid names.
    mkdir -p "$HERE/paperB_trained_640/weights"
    for d in "$RUNS"/paperB_trained_640/outputs/*/; do
      [ -f "$d/readout_weights.json" ] && cp "$d/readout_weights.json" "$HERE/paperB_trained_640/weights/$(basename "$d").json"
    done
  fi
  echo "== $g start $(date -u +%FT%TZ)"
  /usr/bin/time -f "$g wall %e s" "$BIN" run experiments/grids/$g.json --out "$RUNS/$g" --workers 2 --threads 1
  echo "== $g exit $? $(date -u +%FT%TZ)"
done
