#!/usr/bin/env bash
# CPU attention forward + backward: attnsweep vs PyTorch 1.13 (Debian's /usr/bin/python3)
# vs OpenBLAS SGEMM, all with 2 threads, and the cost of collecting the norms.
# usage: bench/attention_cpu.sh [N ...]        (BUILD=build dir, default ./build)
# Prints a table: GFLOP/s (12 BH N^2 d per forward+backward, FlashAttention's count of
# useful flops; best of >= 5 repetitions, the machine may be shared) and the ratios ours/PyTorch, ours/SGEMM, norms-on/norms-off time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${BUILD:-$here/../build}"
bin="$build/bench/attention_cpu"
[[ -x "$bin" ]] || { echo "attention_cpu.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
export OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2
# OpenBLAS 0.3.21 does not know recent Xeons (CPUID model 0xCF) and falls back to its
# SSE3 "Prescott" kernels, halving SGEMM. Pick the AVX-512 (or AVX2) kernels when the CPU
# has them, unless the caller chose; this applies to PyTorch too (it uses the same libblas).
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
echo "# OMP_NUM_THREADS=$OMP_NUM_THREADS OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto} load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
"$bin" "$@" | tee -a "$tmp" >/dev/null
/usr/bin/python3 "$here/attention_cpu.py" --threads 2 "$@" >>"$tmp"
/usr/bin/python3 - "$tmp" <<'PY'
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip()]
sgemm = [r for r in rows if r[0] == "sgemm"][0]
sg = float(sgemm[5])
ours = {(r[1], r[2], r[3]): float(r[4]) for r in rows if r[0] == "attnsweep"}
torch = {(r[1], r[2]): float(r[4]) for r in rows if r[0] == "pytorch"}
gf = {(r[0], r[1], r[2], r[3]): float(r[5]) for r in rows if r[0] in ("attnsweep", "pytorch")}
print(f"OpenBLAS SGEMM {sgemm[1]}: {sg:.1f} GFLOP/s (2 threads)")
print(f"{'activation':<18}{'N':>6}{'ours GF/s':>11}{'ours+norms':>12}{'PyTorch':>9}"
      f"{'ours/PT':>9}{'ours/SGEMM':>12}{'norm cost':>11}")
for (act, n) in sorted(torch, key=lambda k: (int(k[1]), k[0])):
    on, off, pt = gf[("attnsweep", act, n, "on")], gf[("attnsweep", act, n, "off")], gf[("pytorch", act, n, "")]
    cost = ours[(act, n, "on")] / ours[(act, n, "off")] - 1
    print(f"{act:<18}{n:>6}{off:>11.1f}{on:>12.1f}{pt:>9.1f}{on / pt:>8.2f}x{on / sg:>11.0%}{cost:>+11.1%}")
print("ours/PT and ours/SGEMM use the norms-on time (what training runs); norm cost = on/off - 1.")
PY
