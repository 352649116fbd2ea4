#!/usr/bin/env bash
# Training throughput of the reference cell (image task, patch 4 -> N = 49, dim 64, 4
# layers, 4 heads, MLP x4, batch 128, AdamW, softmax) on CPU with 2 threads: attnsweep's
# trainer next to PyTorch 1.13 (Debian's /usr/bin/python3) training the same model in the
# same run, alternating three times (the machine may be shared), best of each.
# usage: bench/trainer_cpu.sh [STEPS]      (BUILD=build dir, default ./build)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${BUILD:-$here/../build}"
bin="$build/bench/trainer_cpu"
steps="${1:-30}"
[[ -x "$bin" ]] || { echo "trainer_cpu.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
# The OpenBLAS kernels attnsweep train picks for itself (base/cpu_env.h) are given to
# PyTorch as well: OpenBLAS 0.3.21 calls this virtualised Xeon "Prescott" (SSE3 kernels)
# unless told. The OpenMP wait policy is each program's own: attnsweep's bounded spin,
# and PyTorch both with its default (spinning) and with OMP_WAIT_POLICY=passive, the
# faster counting (1.13 was faster passive here, 2.15 with its default).
unset OMP_WAIT_POLICY GOMP_SPINCOUNT
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
echo "# 2 threads, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
for rep in 1 2 3; do
  "$bin" 2 "$steps" softmax >>"$tmp"
  /usr/bin/python3 "$here/trainer_cpu.py" 2 "$steps" >>"$tmp"
  OMP_WAIT_POLICY=passive /usr/bin/python3 "$here/trainer_cpu.py" 2 "$steps" >>"$tmp"
done
/usr/bin/python3 - "$tmp" <<'PY'
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
for col, what in ((3, "samples/s (wall)"), (5, "samples per CPU-second")):
    ours = [float(r[col]) for r in rows if r[0] == "attnsweep"]
    pt = [float(r[col]) for r in rows if r[0].startswith("pytorch")]
    print(f"{what}: attnsweep", " ".join(f"{v:.0f}" for v in ours), "| PyTorch", " ".join(f"{v:.0f}" for v in pt))
    print(f"  best: attnsweep {max(ours):.0f}, PyTorch 1.13 {max(pt):.0f}, ratio {max(ours) / max(pt):.2f}x"
          + ("  (target >= 2x)" if col == 3 else ""))
PY

# End to end: a small image grid (softmax vs s^3/sqrt(N), 200 steps) through
# `attnsweep run` and `aggregate` (skip with E2E=0).
if [[ "${E2E:-1}" == 1 ]]; then
  out="$(mktemp -d)"
  "$build/attnsweep" run "$here/../experiments/grids/image_smoke.json" --out "$out" --workers 2
  "$build/attnsweep" aggregate "$out" >/dev/null
  /usr/bin/python3 - "$out/summary.csv" <<'PY'
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    print(f"  {r['activation']:8s} degree={r['degree'] or '-':2s} status={r['status']} "
          f"test_accuracy={float(r['test_accuracy']):.3f} test_loss={float(r['test_loss']):.3f} "
          f"wall={float(r['wall_seconds']):.1f}s")
PY
  rm -rf "$out"
fi
