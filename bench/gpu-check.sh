#!/usr/bin/env bash
# The GPU check of the CUDA trainer and attention kernels, one script
# (shared/device/README.md). On the GPU machine, from the project root, with .devdeps
# carried along:
#   source .devdeps/setup.sh && bash bench/gpu-check.sh
# Builds only unit_tests, attention_gpu and trainer_cpu for sm_90, then, in order of
# importance: the CUDA trainer tests (CudaModel, CudaTrainer*, CudaCollective, the model
# ops), the reference cell's samples/s on CUDA next to PyTorch eager on the same GPU,
# then the attention test suites, the fused-kernel benchmark and its PyTorch baselines.
# Every log goes to $OUT (or ./gpu-check-out). Stages after the trainer's are skipped
# once BUDGET_S (default 420 s) has passed, so the whole check stays under ~8 minutes.
# QUICK=1 drops N = 16384 from the attention benchmarks.
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
say "build unit_tests attention_gpu trainer_cpu"
t0=$(date +%s)
if ! ninja -C "$build" -j "$(nproc)" unit_tests attention_gpu trainer_cpu > "$out/build.log" 2>&1; then
  grep -m 40 -E "error|Error" "$out/build.log"; say "build FAILED"; exit 2
fi
say "built in $(( $(date +%s) - t0 )) s"

budget=${BUDGET_S:-420}
in_budget() { [ "$SECONDS" -lt "$budget" ] || { say "skipped: $1 (past ${budget} s)"; return 1; }; }

# NCCL for data-parallel cells: the system's, else the one PyTorch's wheel ships.
if ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2' && [ ! -e /usr/local/cuda/lib64/libnccl.so.2 ] \
    && [ -z "${ATTNSWEEP_NCCL_LIBRARY:-}" ]; then
  lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -n "$lib" ] && [ -f "$lib" ] && export ATTNSWEEP_NCCL_LIBRARY=$lib
fi
say "NCCL: ${ATTNSWEEP_NCCL_LIBRARY:-libnccl.so.2 from the loader path}"

say "CUDA trainer tests"
timeout 180 "$build/tests/unit_tests" \
  --gtest_filter='CudaModel*:CudaTrainer*:CudaCollective*:OpsCuda.ModelOps*:OpsCuda.Scale*' --gtest_brief=1 \
  --gtest_output="xml:$out/unit_tests_trainer_cuda.xml" > "$out/unit_tests_trainer_cuda.log" 2>&1
tests_rc=$?
tail -25 "$out/unit_tests_trainer_cuda.log" | tee -a "$summary"
say "CUDA trainer tests exit $tests_rc"

say "trainer: reference cell (patch 4, N = 49, dim 64, 4 layers, 4 heads, MLP x4, batch 128, AdamW)"
{
  timeout 90 "$build/bench/trainer_cpu" 1 300 softmax reference cuda
  timeout 150 python3 bench/trainer_cpu.py 1 300 --device cuda
} > "$out/trainer_gpu.log" 2>&1
say "trainer benchmark exit $?"
cat "$out/trainer_gpu.log" | tee -a "$summary"
python3 - "$out/trainer_gpu.log" <<'PY' 2>/dev/null | tee -a "$summary"
import sys
rows = {l.split(",")[0]: float(l.split(",")[3]) for l in open(sys.argv[1]) if l.count(",") == 5}
if "attnsweep-cuda" in rows and "pytorch-cuda" in rows:
    a, p = rows["attnsweep-cuda"], rows["pytorch-cuda"]
    print(f"samples/s: attnsweep {a:.0f}, PyTorch eager {p:.0f}, ratio {a / p:.2f}x")
PY

if in_budget "attention tests"; then
  say "CUDA attention and ops tests"
  timeout 240 "$build/tests/unit_tests" --gtest_filter='*AttentionCuda*:OpsCuda*-OpsCuda.ModelOps*:OpsCuda.Scale*' \
    --gtest_brief=1 --gtest_output="xml:$out/unit_tests_cuda.xml" > "$out/unit_tests_cuda.log" 2>&1
  rc=$?
  tail -15 "$out/unit_tests_cuda.log" | tee -a "$summary"
  say "CUDA attention tests exit $rc"
  [ "$tests_rc" -eq 0 ] && tests_rc=$rc
fi

if in_budget "attention_gpu benchmark"; then
  say "attention_gpu benchmark"
  timeout 150 "$build/bench/attention_gpu" "${quick[@]}" > "$out/attention_gpu.log" 2>&1
  say "attention_gpu exit $?"
  cat "$out/attention_gpu.log"
fi

if in_budget "attention PyTorch baselines"; then
  say "PyTorch baselines"
  timeout 120 python3 bench/attention_gpu_torch.py "${quick[@]}" > "$out/attention_gpu_torch.log" 2>&1
  say "attention_gpu_torch exit $?"
  cat "$out/attention_gpu_torch.log"
fi

exit "$tests_rc"
