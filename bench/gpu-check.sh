#!/usr/bin/env bash
# The GPU check of the CUDA attention kernels, one script (shared/device/README.md).
# On the GPU machine, from the project root, with .devdeps carried along:
#   source .devdeps/setup.sh && bash bench/gpu-check.sh
# Builds only unit_tests and attention_gpu for sm_90, runs the CUDA test suites, the
# fused-kernel benchmark and the PyTorch baselines, and copies every log to $OUT (or
# ./gpu-check-out). QUICK=1 drops N = 16384 from both benchmarks.
# Exit status: that of the CUDA tests (configure/build failures: 2).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
build=${BUILD_DIR:-build-gpu}
quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)
summary="$out/summary.txt"
: > "$summary"
say() { echo "== $(date +%T) $*" | tee -a "$summary"; }

say "host $(hostname), $(nproc) cores"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed"
nvcc --version > "$out/nvcc.txt" 2>&1 || /usr/local/cuda/bin/nvcc --version > "$out/nvcc.txt" 2>&1

say "configure"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/configure.log" 2>&1; then
  tail -40 "$out/configure.log"; say "configure FAILED"; exit 2
fi
say "build unit_tests attention_gpu"
t0=$(date +%s)
if ! ninja -C "$build" -j "$(nproc)" unit_tests attention_gpu > "$out/build.log" 2>&1; then
  grep -m 40 -E "error|Error" "$out/build.log"; say "build FAILED"; exit 2
fi
say "built in $(( $(date +%s) - t0 )) s"

say "CUDA tests"
timeout 240 "$build/tests/unit_tests" --gtest_filter='*AttentionCuda*' --gtest_brief=1 \
  --gtest_output="xml:$out/unit_tests_cuda.xml" > "$out/unit_tests_cuda.log" 2>&1
tests_rc=$?
tail -15 "$out/unit_tests_cuda.log" | tee -a "$summary"
say "CUDA tests exit $tests_rc"

say "attention_gpu benchmark"
timeout 240 "$build/bench/attention_gpu" "${quick[@]}" > "$out/attention_gpu.log" 2>&1
say "attention_gpu exit $?"
cat "$out/attention_gpu.log"

say "PyTorch baselines"
timeout 180 python3 bench/attention_gpu_torch.py "${quick[@]}" > "$out/attention_gpu_torch.log" 2>&1
say "attention_gpu_torch exit $?"
cat "$out/attention_gpu_torch.log"

exit "$tests_rc"
