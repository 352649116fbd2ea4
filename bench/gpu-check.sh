#!/usr/bin/env bash
# The GPU check of the CUDA trainer and attention kernels, one script
# (shared/device/README.md). On the build machine first: `bash bench/gpu-bundle.sh`
# (binaries + their libraries in .gpubin/) and `../shared/device/stage-deps.sh`
# (.devdeps/, for the fallback build). On the GPU machine, from the project root, with
# .gpubin and .devdeps carried:
#   bash bench/gpu-check.sh
# Uses the bundled binaries when they load, else builds unit_tests, attention_gpu,
# trainer_cpu and attnsweep for sm_90 there. Then, in order of importance:
#   1. the CUDA trainer tests (CudaModel, CudaTrainer*, CudaCollective, the model ops),
#      and compute-sanitizer memcheck on the trainer if they fail;
#   2. attnsweep train of a paper B cell and a PDE cell on the GPU and on the CPU, final
#      metrics side by side;
#   3. training samples/s on the GPU next to PyTorch eager (and torch.compile) on the
#      same GPU: the reference cell, the image cells at N = 16 and 196, a larger cell;
#   4. every other CUDA test (attention kernels, ops);
#   5. the fused-attention benchmark and its PyTorch baselines;
#   7. (issue #19, only when asked: STAGES=7, under 4 minutes) the tensor-core kernels:
#      their tests (*AttentionCudaMma*: forward bf16/fp16, backward bf16), then
#      attention_gpu --mma (mma forward bf16 / fp16 and mma backward against the fused
#      kernels, d = 64, 128, N = 1k, 4k, 16k) and the SDPA FlashAttention-2 rows of
#      attention_gpu_torch.py --sdpa-only, then (time left) the AttentionCuda suite at
#      d = 64, 128 with ATTNSWEEP_CUDA_MMA=1, all within MMA_BUDGET_S (default 230 s).
#      Run it first on a fresh machine: STAGES=7 bash bench/gpu-check.sh
# Every log goes to $OUT (or ./gpu-check-out); summary.txt holds the gist. Stages 4-5
# are skipped once BUDGET_S (default 330 s) has passed. QUICK=1 drops N = 16384 from the
# attention benchmarks. Exit status: that of the CUDA tests (setup/build failures: 2).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu-check-out}
mkdir -p "$out"
quick=()
[ "${QUICK:-0}" = 1 ] && quick=(--quick)
summary="$out/summary.txt"
: > "$summary"
say() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$summary"; }
budget=${BUDGET_S:-330}
stages=" ${STAGES:-1 2 3 4 5} "
stage() { [[ "$stages" == *" $1 "* ]]; }
in_budget() { [ "$SECONDS" -lt "$budget" ] || { say "skipped: $1 (past ${budget} s)"; return 1; }; }

say "host $(hostname), $(nproc) cores, commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || say "nvidia-smi failed"
grep -m1 -E 'H200|H100|NVIDIA' "$out/nvidia-smi.txt" | tee -a "$summary"

# cuBLAS and NCCL are loaded with dlopen: the toolkit's, else the ones PyTorch's wheels ship.
pylib() { python3 -c "import $1, os; print(os.path.join(list($1.__path__)[0], 'lib'))" 2>/dev/null; }
extra_libs=/usr/local/cuda/lib64
for m in nvidia.cublas nvidia.cu13 nvidia.nccl; do d=$(pylib $m); [ -n "$d" ] && [ -d "$d" ] && extra_libs+=":$d"; done
if [ -z "${ATTNSWEEP_NCCL_LIBRARY:-}" ]; then
  for d in ${extra_libs//:/ }; do [ -f "$d/libnccl.so.2" ] && export ATTNSWEEP_NCCL_LIBRARY=$d/libnccl.so.2 && break; done
fi
say "NCCL: ${ATTNSWEEP_NCCL_LIBRARY:-libnccl.so.2 from the loader path}"

# Our binaries run with our libraries; Python keeps the machine's own.
bin=""
libpath=""
if [ -f .gpubin/bundle.tar.xz ]; then
  rm -rf /tmp/ab && mkdir -p /tmp/ab && tar -C /tmp/ab -xJf .gpubin/bundle.tar.xz
  libpath=/tmp/ab/lib:$extra_libs
  if LD_LIBRARY_PATH=$libpath ldd /tmp/ab/bin/unit_tests 2>&1 | grep -q 'GLIBCXX\|CXXABI'; then
    libpath=/tmp/ab/lib:/tmp/ab/lib-cxx:$extra_libs
    say "the machine's libstdc++ is older: using the bundled one"
  fi
  missing=$(for b in /tmp/ab/bin/*; do LD_LIBRARY_PATH=$libpath ldd "$b"; done 2>&1 | grep -E 'not found' | sort -u)
  if [ -z "$missing" ] && LD_LIBRARY_PATH=$libpath /tmp/ab/bin/unit_tests --gtest_list_tests > /dev/null 2>&1; then
    bin=/tmp/ab/bin
    say "bundled binaries of commit $(cat /tmp/ab/commit | cut -c1-7) load"
  else
    say "bundled binaries do not load: $missing"
  fi
fi
if [ -z "$bin" ]; then
  build=${BUILD_DIR:-build-gpu}
  [ -f .devdeps/setup.sh ] && source .devdeps/setup.sh
  say "configure + build ($build)"
  if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES=90 > "$out/configure.log" 2>&1; then
    tail -40 "$out/configure.log"; say "configure FAILED"; exit 2
  fi
  if ! ninja -C "$build" -j "$(nproc)" unit_tests attention_gpu trainer_cpu attnsweep > "$out/build.log" 2>&1; then
    grep -m 40 -E "error|Error" "$out/build.log"; say "build FAILED"; exit 2
  fi
  mkdir -p /tmp/ab/bin
  cp "$build/tests/unit_tests" "$build/bench/attention_gpu" "$build/bench/trainer_cpu" "$build/attnsweep" /tmp/ab/bin/
  bin=/tmp/ab/bin
  libpath=${LD_LIBRARY_PATH:-}:$extra_libs
  say "built"
fi
ab() { LD_LIBRARY_PATH=$libpath "$@"; }

tests_rc=0
if stage 1; then
say "1. CUDA trainer tests"
ab timeout 200 "$bin/unit_tests" \
  --gtest_filter='CudaModel*:CudaTrainer*:CudaCollective*:OpsCuda.ModelOps*:OpsCuda.Scale*' \
  --gtest_output="xml:$out/trainer_cuda.xml" > "$out/trainer_cuda.log" 2>&1
tests_rc=$?
grep -E '^\[  (FAILED|SKIPPED|PASSED) |^\[       OK|^\[==========\]|Failure|Expected|Which is|actual|error|rror:' \
  "$out/trainer_cuda.log" | head -80 | tee -a "$summary"
say "CUDA trainer tests exit $tests_rc"
if [ "$tests_rc" -ne 0 ] && command -v compute-sanitizer > /dev/null; then
  first=$(grep -m1 -oE '^\[  FAILED  \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+' "$out/trainer_cuda.log" | awk '{print $NF}')
  if [ -n "$first" ]; then
    say "compute-sanitizer memcheck on $first"
    ab timeout 120 compute-sanitizer --tool memcheck --print-limit 20 "$bin/unit_tests" --gtest_filter="$first" \
      > "$out/memcheck.log" 2>&1
    grep -E '=========|FAILED|OK \]' "$out/memcheck.log" | head -60 | tee -a "$summary"
  fi
fi
fi

if stage 2; then
say "2. attnsweep train on cuda and on cpu (paper B read-out, PDE token regression)"
mkdir -p /tmp/e2e
for g in paperB_icl_small paperA_pde_small; do
  ab "$bin/attnsweep" plan "experiments/grids/$g.json" --json > "/tmp/e2e/$g.plan.json" 2>> "$out/e2e.log"
  python3 -c "import json,sys; c=json.load(open('/tmp/e2e/$g.plan.json'))['cells'][-1]['config']; json.dump(c, open('/tmp/e2e/$g.json','w'))"
  for dev in cuda cpu; do
    ab timeout 60 "$bin/attnsweep" train "/tmp/e2e/$g.json" --out "/tmp/e2e/$g-$dev.h5" --device "$dev" >> "$out/e2e.log" 2>&1
    echo "$g $dev exit $?" >> "$out/e2e.log"
  done
done
tail -8 "$out/e2e.log" | tee -a "$summary"
python3 - <<'PY' 2>&1 | tee -a "$summary"
import h5py
for g in ("paperB_icl_small", "paperA_pde_small"):
    print(g)
    for dev in ("cuda", "cpu"):
        try:
            with h5py.File(f"/tmp/e2e/{g}-{dev}.h5", "r") as f:
                d = {k: round(float(v), 6) for k, v in f["final"].attrs.items()}
                loss = f["train/loss"][()]
                print(f"  {dev}: status={f.attrs['status']} device={f.attrs['device']} wall={f.attrs['wall_seconds']:.2f}s "
                      f"loss first/last={loss[0]:.6f}/{loss[-1]:.6f}", d)
        except Exception as e:
            print(f"  {dev}: {e!r}")
PY
fi

if stage 3; then
say "3. training samples/s on the GPU"
for cell in reference image16 image196 large; do
  steps=300; [ "$cell" = large ] && steps=100
  ab timeout 90 "$bin/trainer_cpu" 1 $steps softmax $cell cuda >> "$out/trainer_gpu.log" 2>&1
  timeout 120 python3 bench/trainer_cpu.py 1 $steps --cell $cell --device cuda >> "$out/trainer_gpu.log" 2>&1
done
ab timeout 90 "$bin/trainer_cpu" 1 300 poly reference cuda >> "$out/trainer_gpu.log" 2>&1
in_budget "torch.compile baseline" && timeout 150 python3 bench/trainer_cpu.py 1 300 --compile --device cuda >> "$out/trainer_gpu.log" 2>&1
grep -v '^W\|Warning\|warn' "$out/trainer_gpu.log" | tail -20 | tee -a "$summary"
python3 - "$out/trainer_gpu.log" <<'PY' 2>&1 | tee -a "$summary"
import sys
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.count(",") == 5]
ours = {r[1]: float(r[3]) for r in rows if r[0] == "attnsweep-cuda"}
for r in rows:
    if r[0].startswith("pytorch") and r[1] in ours:
        print(f"{r[1]}: attnsweep {ours[r[1]]:.0f} samples/s, {r[0]} {float(r[3]):.0f}, ratio {ours[r[1]] / float(r[3]):.2f}x")
PY
fi

if stage 4 && in_budget "attention and ops tests"; then
  say "4. the other CUDA tests (attention kernels, ops)"
  ab timeout 200 "$bin/unit_tests" --gtest_filter='*Cuda*-CudaModel*:CudaTrainer*:CudaCollective*:OpsCuda.ModelOps*:OpsCuda.Scale*:*AttentionCudaMma*' \
    --gtest_brief=1 --gtest_output="xml:$out/other_cuda.xml" > "$out/other_cuda.log" 2>&1
  rc=$?
  grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED|^\[  SKIPPED' "$out/other_cuda.log" | head -40 | tee -a "$summary"
  grep -m 30 -B2 -A6 'Failure' "$out/other_cuda.log" >> "$summary"
  say "other CUDA tests exit $rc"
  [ "$tests_rc" -eq 0 ] && tests_rc=$rc
fi

if stage 5 && in_budget "attention_gpu benchmark"; then
  say "5. attention_gpu benchmark"
  ab timeout 120 "$bin/attention_gpu" "${quick[@]}" > "$out/attention_gpu.log" 2>&1
  say "attention_gpu exit $?"
  tail -40 "$out/attention_gpu.log" >> "$summary"
fi
if stage 5 && in_budget "attention PyTorch baselines"; then
  timeout 120 python3 bench/attention_gpu_torch.py "${quick[@]}" > "$out/attention_gpu_torch.log" 2>&1
  say "attention_gpu_torch exit $?"
  tail -40 "$out/attention_gpu_torch.log" >> "$summary"
fi
# 7. The tensor-core kernels (issue #19): tests, then their benchmark against the fused
# kernels and SDPA. Each step under its own timeout, all inside MMA_BUDGET_S.
if stage 7; then
  t7=$SECONDS
  mma_budget=${MMA_BUDGET_S:-230}
  left7() { echo $(( mma_budget - (SECONDS - t7) )); }
  say "7. tensor-core attention: tests (*AttentionCudaMma*)"
  ab timeout 110 "$bin/unit_tests" --gtest_filter='*AttentionCudaMma*:HalfFloatHost*' --gtest_brief=1 \
    --gtest_output="xml:$out/mma_tests.xml" > "$out/mma_tests.log" 2>&1
  rc=$?
  grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED|^\[  SKIPPED' "$out/mma_tests.log" | head -40 | tee -a "$summary"
  grep -m 30 -B2 -A6 'Failure' "$out/mma_tests.log" >> "$summary"
  say "mma tests exit $rc"
  [ "$tests_rc" -eq 0 ] && tests_rc=$rc
  if [ "$rc" -ne 0 ] && command -v compute-sanitizer > /dev/null && [ "$(left7)" -gt 60 ]; then
    say "compute-sanitizer memcheck + racecheck on one mma case"
    ab timeout 40 compute-sanitizer --tool memcheck --print-limit 20 "$bin/unit_tests" \
      --gtest_filter='Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64_mask_causal_bf16' \
      > "$out/mma_memcheck.log" 2>&1
    grep -E '=========|FAILED|OK \]' "$out/mma_memcheck.log" | head -30 | tee -a "$summary"
    ab timeout 40 compute-sanitizer --tool racecheck --print-limit 20 "$bin/unit_tests" \
      --gtest_filter='Shapes/AttentionCudaMma.ForwardMatchesCpu/relu_none_q300_k7_d128_f16' \
      > "$out/mma_racecheck.log" 2>&1
    grep -E '=========|FAILED|OK \]' "$out/mma_racecheck.log" | head -30 | tee -a "$summary"
  fi
  l=$(left7)
  if [ "$l" -gt 20 ]; then
    say "7. attention_gpu --mma"
    ab timeout $(( l < 100 ? l : 100 )) "$bin/attention_gpu" --mma "${quick[@]}" > "$out/attention_mma.log" 2>&1
    say "attention_gpu --mma exit $?"
    cat "$out/attention_mma.log" >> "$summary"
  else
    say "skipped: attention_gpu --mma (past MMA_BUDGET_S)"
  fi
  l=$(left7)
  if [ "$l" -gt 10 ]; then
    timeout $(( l < 45 ? l : 45 )) python3 bench/attention_gpu_torch.py --sdpa-only "${quick[@]}" \
      > "$out/attention_sdpa.log" 2>&1
    say "attention_gpu_torch --sdpa-only exit $?"
    cat "$out/attention_sdpa.log" >> "$summary"
  else
    say "skipped: SDPA baseline (past MMA_BUDGET_S)"
  fi
  # With what is left: the existing AttentionCuda suite (bf16 at d = 64, 128) through
  # attention_forward_cuda / attention_backward_cuda with the tensor-core kernels switched in.
  l=$(left7)
  if [ "$l" -gt 20 ]; then
    ATTNSWEEP_CUDA_MMA=1 ab timeout "$l" "$bin/unit_tests" --gtest_brief=1 \
      --gtest_filter='Shapes/AttentionCuda.*_d64*:Shapes/AttentionCuda.*_d128*:AttentionCudaDeterminism.*' \
      > "$out/mma_via_suite.log" 2>&1
    rc=$?
    grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED' "$out/mma_via_suite.log" | head -20 | tee -a "$summary"
    say "AttentionCuda suite with ATTNSWEEP_CUDA_MMA=1 exit $rc (124: cut at MMA_BUDGET_S)"
    [ "$rc" -ne 124 ] && [ "$tests_rc" -eq 0 ] && tests_rc=$rc
  fi
  say "7. done in $((SECONDS - t7)) s"
fi

# 6. Whole sweeps on the GPU slot (attnsweep run, no mpirun: one slot per visible GPU),
# timed, aggregated: SWEEP_GRIDS (default paperB_icl_cpu): names under experiments/grids/
# or paths to grid files.
# Fashion-MNIST grids need the data: carry its .gz files and set ATTNSWEEP_FASHION_MNIST_DIR.
if stage 6; then
  for gpath in ${SWEEP_GRIDS:-paperB_icl_cpu}; do
    g=$(basename "$gpath" .json)
    [[ "$gpath" == *.json ]] || gpath="experiments/grids/$gpath.json"
    say "6. attnsweep run $g on the GPU"
    t0=$SECONDS
    ab timeout "${SWEEP_TIMEOUT_S:-200}" "$bin/attnsweep" run "$gpath" --out "/tmp/sweep-$g" \
      --progress-every-s 20 > "$out/sweep-$g.log" 2>&1
    say "run $g exit $? in $((SECONDS - t0)) s"
    tail -4 "$out/sweep-$g.log" | tee -a "$summary"
    ab "$bin/attnsweep" aggregate "/tmp/sweep-$g" >> "$out/sweep-$g.log" 2>&1
    cp "/tmp/sweep-$g/summary.csv" "$out/summary-$g.csv" 2>/dev/null
    python3 - "/tmp/sweep-$g" <<'PY' 2>&1 | tee -a "$summary"
import csv, glob, sys, h5py
rows = list(csv.DictReader(open(sys.argv[1] + "/summary.csv")))
print(f"{len(rows)} rows; status: " + ", ".join(sorted({r.get('status', '?') for r in rows})))
walls = []
for p in glob.glob(sys.argv[1] + "/runs/*.h5"):
    with h5py.File(p, "r") as f:
        walls.append(float(f.attrs["wall_seconds"]))
        gpu = f.attrs.get("gpu_name", f.attrs.get("device", "?"))
if walls:
    print(f"cells {len(walls)}, wall per cell mean {sum(walls) / len(walls):.1f} s, max {max(walls):.1f} s, on {gpu}")
PY
  done
fi
say "done, tests exit $tests_rc"
exit "$tests_rc"
