#!/usr/bin/env bash
# CPU attention forward + backward: attnsweep vs PyTorch 1.13 (Debian's /usr/bin/python3)
# vs OpenBLAS SGEMM, all with 2 threads (THREADS), and the cost of collecting the norms.
# usage: bench/attention_cpu.sh [N ...]   (env: BUILD=build dir, default ./build; REPEAT=2;
#        THREADS=2; ATTN_BENCH_SECONDS=3 per configuration and program run)
# Prints a table: GFLOP/s (12 BH N^2 d per forward+backward, FlashAttention's count of
# useful flops; best times, the machine may be shared) and the ratios ours/PyTorch,
# ours/SGEMM and norms-on/norms-off time.
# Timing noise on a shared machine can swamp the norms' cost; count instructions instead:
#   OMP_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell valgrind --tool=callgrind \
#     --toggle-collect='attnsweep::attention_*' build/bench/attention_cpu --profile on softmax 256
# (and `off`; Haswell because valgrind has no AVX-512).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="${BUILD:-$here/../build}"
bin="$build/bench/attention_cpu"
[[ -x "$bin" ]] || { echo "attention_cpu.sh: $bin not built (cmake --build $build)" >&2; exit 2; }
threads="${THREADS:-2}"
export OMP_NUM_THREADS="$threads" OPENBLAS_NUM_THREADS="$threads"
# OpenBLAS 0.3.21 does not know recent Xeons (CPUID model 0xCF) and falls back to its
# SSE3 "Prescott" kernels, halving SGEMM. Pick the AVX-512 (or AVX2) kernels when the CPU
# has them, unless the caller chose; this applies to PyTorch too (it uses the same libblas).
if [[ -z "${OPENBLAS_CORETYPE:-}" ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi
# On a shared machine, spinning OpenMP threads (the default OMP_WAIT_POLICY) turn other
# processes' load into 10-20 ms stalls per parallel region, for us and for PyTorch alike;
# OMP_WAIT_POLICY=passive trades some latency for steadier numbers. Reported, not set.
echo "# OMP_NUM_THREADS=$OMP_NUM_THREADS OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-default} OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto} load: $(cut -d' ' -f1-3 /proc/loadavg)"
tmp="$(mktemp)"
trap 'rm -f "$tmp"' EXIT
# REPEAT runs of each program (default 2), alternating; each figure is the best of them.
for ((r = 0; r < ${REPEAT:-2}; r++)); do
  "$bin" "$@" >>"$tmp"
  /usr/bin/python3 "$here/attention_cpu.py" --threads "$threads" "$@" >>"$tmp"
done
/usr/bin/python3 - "$tmp" <<'PY'
import os
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
sec = {}
for r in rows:  # best (minimum) time over the repeats
    r[0] = "pytorch" if r[0].startswith("pytorch") else r[0]
    key = (r[0], r[1], r[2], r[3])
    sec[key] = min(sec.get(key, float("inf")), float(r[4]))
flops = lambda key: (2.0 * 1024 ** 3) if key[0] == "sgemm" else 12.0 * 32 * int(key[2]) ** 2 * 64
gf = {key: flops(key) / t * 1e-9 for key, t in sec.items()}
keys = sorted({(r[1], r[2]) for r in rows if r[0].startswith("pytorch")}, key=lambda k: (int(k[1]), k[0]))
print(f"{'activation':<18}{'N':>6}{'ours':>8}{'+norms':>8}{'PyTorch':>9}{'SGEMM':>8}"
      f"{'ours/PyTorch':>14}{'ours/SGEMM':>12}{'norm cost':>11}")
for act, n in keys:
    on, off = gf[("attnsweep", act, n, "on")], gf[("attnsweep", act, n, "off")]
    pt, sg = gf[("pytorch", act, n, "")], gf[("sgemm", act, n, "")]
    cost = sec[("attnsweep", act, n, "on")] / sec[("attnsweep", act, n, "off")] - 1
    print(f"{act:<18}{n:>6}{off:>8.1f}{on:>8.1f}{pt:>9.1f}{sg:>8.1f}{on / pt:>13.2f}x{on / sg:>12.0%}{cost:>+11.1%}")
print(f"GFLOP/s, {os.environ['OMP_NUM_THREADS']} threads. ours/PyTorch and ours/SGEMM use the norms-on time (what a training step")
print("runs); SGEMM is 1024^3 timed in the same rounds as each row; norm cost = time(on)/time(off) - 1.")
PY
