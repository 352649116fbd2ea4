#!/usr/bin/env bash
# `attnsweep verdict` on the 288-cell paper B aggregate (bench/results/cpu-2026-12-02-paperB-300k,
# the claims of experiments/grids/paperB_icl_paired.json: a difference, an equivalence and a
# difference trend), 10,000 resamples a claim, wall time of the whole command (median of
# 7), beside the baseline measured in the same run: the pooled difference claim's paired
# bootstrap written directly in numpy (/usr/bin/python3, the vectorised way: a 10,000 x
# 144 index matrix), also the whole process.
#   bash bench/verdict.sh [BIN]      (default build/attnsweep)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/attnsweep}
DIR=bench/results/cpu-2026-12-02-paperB-300k
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
time_of() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
for i in 1 2 3 4 5 6 7; do
  time_of "$BIN" verdict "$DIR" --claims experiments/grids/paperB_icl_paired.json --resamples 10000 --csv "$TMP/v.csv"
done | median >"$TMP/ours"
cat >"$TMP/numpy_boot.py" <<'PY'
import csv, sys
import numpy as np
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["status"] == "complete"]
a, b = {}, {}
for r in rows:
    key = (r["init_seed"], r["seed"], r["prompt_length"])
    if r["activation"] == "softmax":
        a[key] = float(r["test_mse"])
    elif r["activation"] == "poly" and r["degree"] == "1" and r["scale"] == "inv_n":
        b[key] = float(r["test_mse"])
d = np.array([a[k] - b[k] for k in sorted(a) if k in b])
idx = np.random.default_rng(0).integers(0, len(d), size=(10000, len(d)))
m = d[idx].mean(axis=1)
print(len(d), d.mean(), *np.percentile(m, [2.5, 97.5]))
PY
for i in 1 2 3 4 5 6 7; do time_of /usr/bin/python3 "$TMP/numpy_boot.py" "$DIR/summary.csv"; done | median >"$TMP/numpy"
ours=$(cat "$TMP/ours"); np=$(cat "$TMP/numpy")
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "attnsweep verdict, 288 cells, 3 claims x 10,000 resamples: median wall $(printf %.3f "$ours") s (limit 2 s)"
echo "baseline, numpy paired bootstrap of 1 claim (144 units x 10,000), whole python3 process: median wall $(printf %.3f "$np") s"
echo "ratio baseline / attnsweep: $(echo "$np / $ours" | bc -l | xargs printf %.1f)x (attnsweep decides 3 claims in that time)"
