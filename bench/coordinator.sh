#!/usr/bin/env bash
# Coordinator overhead and slot utilisation (issue 2), against a named baseline run
# in the same go: GNU xargs -P running the very same `attnsweep train` children with
# no coordinator at all.
#   1. 2,000 synthetic cells of 0 s over 4 slots: wall time per cell in ms (and the slot
#      time, wall x slots / cells), ours vs xargs; their difference is what the
#      coordinator itself costs (scheduling, events, status, result checks).
#   2. 200 cells with heavy-tailed durations (Pareto, alpha 1.5, mean ~0.25 s, capped
#      at 4 s) over 4 slots: utilisation = sum of cell wall times / (slots x wall).
# Usage: bench/coordinator.sh [BUILD_DIR]   (default build/)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${1:-$ROOT/build}/attnsweep
PY=/usr/bin/python3
W=$(mktemp -d /tmp/attnsweep-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
cd "$W"
now() { date +%s.%N; }

$PY - <<'PY'
import json, random
json.dump({"name": "bench-zero", "axes": {"task": ["synthetic"], "seed": list(range(2000))}}, open("zero.json", "w"))
rng = random.Random(7)
inc = []
for i in range(200):
    s = min(4.0, 0.25 / 3 * rng.paretovariate(1.5))  # Pareto(1.5) has mean 3 x scale
    inc.append({"task": "synthetic", "seed": i, "seconds": round(s, 4)})
json.dump({"name": "bench-tail", "include": inc}, open("tail.json", "w"))
PY

echo "== 2,000 cells of 0 s, 4 slots =="
t0=$(now); "$BIN" run zero.json --out zero --workers 4 --threads 1 --progress-every-s 1e9 2>/dev/null; t1=$(now)
# Baseline: the same children, launched by xargs -P 4 (no scheduling, no bookkeeping).
ls zero/cells/*.json > list.txt
t2=$(now)
# The children get what the slots give theirs (no start-up re-exec, base/cpu_env.h).
ATTNSWEEP_CPU_ENV_SET=1 OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  xargs -P 4 -I{} sh -c 'exec "$0" train "$1" --out "$1.h5" >/dev/null' "$BIN" {} < list.txt
t3=$(now)
$PY - "$t0" "$t1" "$t2" "$t3" <<'PY'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:])
ours, base = t1 - t0, t3 - t2
per_wall = ours / 2000 * 1e3
per_slot = ours * 4 / 2000 * 1e3
base_wall = base / 2000 * 1e3
print(f"attnsweep run : {ours:6.2f} s wall, {2000/ours:6.1f} cells/s, {per_wall:5.2f} ms wall per cell, {per_slot:6.2f} ms of slot time per cell")
print(f"xargs -P 4    : {base:6.2f} s wall, {2000/base:6.1f} cells/s, {base_wall:5.2f} ms wall per cell (the same children, no coordinator)")
over = (ours - base) / 2000 * 1e3
print(f"ratio attnsweep / xargs wall: {ours/base:.3f}")
print(f"coordinator overhead per cell (ours - xargs): {over:+.2f} ms; target <= 10 ms: {'met' if over <= 10 else 'NOT met'}")
print(f"whole cost of a 0 s cell (exec, start-up, HDF5 result, bookkeeping): {per_wall:.2f} ms of wall on this machine")
PY

echo "== 200 heavy-tailed cells, 4 slots =="
t0=$(now); "$BIN" run tail.json --out tail --workers 4 --threads 1 --progress-every-s 1e9 2>/dev/null; t1=$(now)
$PY - "$t0" "$t1" tail/events.jsonl tail.json <<'PY'
import json, sys
t0, t1 = float(sys.argv[1]), float(sys.argv[2])
ev = [json.loads(l) for l in open(sys.argv[3])]
busy = sum(e["wall_s"] for e in ev if e["event"] == "finished")
secs = sorted(c["seconds"] for c in json.load(open(sys.argv[4]))["include"])
wall = t1 - t0
bound = max(sum(secs) / 4, secs[-1])
print(f"durations: total {sum(secs):.1f} s, median {secs[100]:.3f} s, max {secs[-1]:.2f} s; lower bound on wall {bound:.2f} s")
print(f"wall {wall:.2f} s, slot utilisation {busy / (4 * wall) * 100:.1f}% (busy {busy:.1f} slot-s of {4 * wall:.1f}); "
      f"wall / lower bound = {wall / bound:.3f}; target >= 95%: {'met' if busy / (4 * wall) >= 0.95 else 'NOT met'}")
PY
