#!/usr/bin/env bash
# The GPU check of the CUDA trainer and attention kernels, one script
# On the build machine first: `bash bench/gpu-bundle.sh`
# (binaries + their libraries in .gpubin/) and `../shared/device/stage-deps.sh`
# (.devdeps/, for the fallback build). On the GPU machine, from the project root, with
# .gpubin and .devdeps carried:
#   bash bench/gpu-check.sh
# Uses the bundled binaries when they load, else builds unit_tests, attention_gpu,
# trainer_cpu and attnsweep for sm_90 there. Then, in order of importance:
#   1. the CUDA trainer tests (CudaModel, CudaTrainer*, CudaCollective, every plain op
#      against the CPU: CrossBackendOps, and the global norm),
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
#   8. (issue #20, only when asked: STAGES=8, under 4 minutes) the trainer at the sizes of
#      real sweeps: the CUDA trainer tests (CudaModel.*, CudaTrainer*: bf16, tf32, padding,
#      the kernel timer), then ONE table of training samples/s for the reference cell,
#      the large cell, ListOps at N 2000 (padded) and paper B's read-out at L 1000: ours
#      fp32 and bf16 next to PyTorch eager fp32, eager AMP bf16 and torch.compile AMP bf16,
#      with per-step wall and kernel ms (the difference: host overhead), then cells per
#      GPU-hour of `attnsweep run` for K = 1, 2, 4, 8 cells per GPU (--cells-per-gpu) on
#      small paperA_fmnist-like N 16 cells and paper B cells, without and (where
#      nvidia-cuda-mps-control exists) with CUDA MPS; all within STAGE8_BUDGET_S
#      (default 230 s), later parts skipped past it. REHEARSE=1 runs every command of it on
#      the CPU with tiny steps (BUILD_DIR's binaries, PYTHON, default /usr/bin/python3):
#        REHEARSE=1 BUILD_DIR=build STAGES=8 bash bench/gpu-check.sh
#      proves the commands, the parsing and the tables there; its figures mean nothing.
#   9. (issue #28, only when asked: STAGES=9, under 2 minutes) the read-out in its own
#      algebra on CUDA: its tests, then a paper B cell at L = 1000 through the algebra and
#      through the op sequence, ms a step and final metrics side by side (REHEARSE=1 too).
#  11. (issue #39, only when asked: STAGES=11, under 1 minute) the emulated device's
#      primitive tests and a few kernels on the real one (below).
#  10. (issue #28, only when asked: STAGES=10, under 2 minutes) training prompts made on
#      the device and cells trained as one on a GPU: their tests, then the L = 1000 cell on
#      host and device batches, op by op and in step graphs (ms a step, bit-identical
#      results), and 16 cells as one group against one a process (REHEARSE=1 too).
#  12. (issue #53, only when asked: STAGES=12, about 3 minutes) the PyTorch op with its
#      CUDA kernels: built there against the machine's PyTorch (build-op/), then
#      tests/integration/torch_op_cuda.py (every activation in float32 and bf16 against
#      the float64 composite; time and peak memory at N 1k and 4k against the composite).
#      REHEARSE=1 runs the script on the CPU op of BUILD_DIR (DEVICE=cpu).
# Every log goes to $OUT (or ./gpu-check-out); summary.txt holds the gist. Stages 4-5
# are skipped once BUDGET_S (default 330 s) has passed. QUICK=1 drops N = 16384 from the
# attention benchmarks. Exit status: that of the CUDA tests (setup/build failures: 2).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
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
rehearse=${REHEARSE:-0}
py=${PYTHON:-python3}
if [ "$rehearse" = 1 ]; then
  # The CPU rehearsal (stage 8): the build directory's binaries as they are, no GPU.
  build=${BUILD_DIR:-build}
  py=${PYTHON:-/usr/bin/python3}
  rm -rf /tmp/ab-rehearse && mkdir -p /tmp/ab-rehearse/bin
  for b in tests/unit_tests bench/trainer_cpu attnsweep tests/emulator_tests gpu_primitive_tests; do
    [ -x "$build/$b" ] && ln -s "$(cd "$build" && pwd)/$b" /tmp/ab-rehearse/bin/
  done
  bin=/tmp/ab-rehearse/bin
  libpath=${LD_LIBRARY_PATH:-}
  say "REHEARSE=1: on the CPU with $build's binaries ($(cd "$bin" && echo *)) and $py; no figure here means anything"
fi
if [ -z "$bin" ] && [ -f .gpubin/bundle.tar.xz ]; then
  rm -rf /tmp/ab && mkdir -p /tmp/ab && tar -C /tmp/ab -xJf .gpubin/bundle.tar.xz
  libpath=/tmp/ab/lib:$extra_libs
  if LD_LIBRARY_PATH=$libpath ldd /tmp/ab/bin/unit_tests 2>&1 | grep -q 'GLIBCXX\|CXXABI'; then
    libpath=/tmp/ab/lib:/tmp/ab/lib-cxx:$extra_libs
    say "the machine's libstdc++ is older: using the bundled one"
  fi
  missing=$(for b in /tmp/ab/bin/*; do LD_LIBRARY_PATH=$libpath ldd "$b"; done 2>&1 | grep -E 'not found' | sort -u)
  if [ -z "$missing" ] && LD_LIBRARY_PATH=$libpath /tmp/ab/bin/unit_tests --gtest_list_tests > /dev/null 2>&1; then
    bin=/tmp/ab/bin
    say "bundled binaries of commit $(cut -c1-7 /tmp/ab/commit) load"
  else
    say "bundled binaries do not load: $missing"
  fi
fi
if [ -z "$bin" ]; then
  build=${BUILD_DIR:-build-gpu}
  # shellcheck source=/dev/null
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
# gtest_stage NAME WHAT TIMEOUT_S FILTER: unit_tests on FILTER (brief), its log and xml in
# $out/NAME.*, the result lines and first failures in the summary; rc is its exit status,
# folded into tests_rc.
gtest_stage() {
  ab timeout "$3" "$bin/unit_tests" --gtest_filter="$4" --gtest_brief=1 --gtest_output="xml:$out/$1.xml" \
    > "$out/$1.log" 2>&1
  rc=$?
  grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED|^\[  SKIPPED' "$out/$1.log" | head -40 | tee -a "$summary"
  grep -m 30 -B2 -A6 'Failure' "$out/$1.log" >> "$summary"
  say "$2 exit $rc"
  [ "$tests_rc" -eq 0 ] && tests_rc=$rc
}

tests_rc=0
if stage 1; then
say "1. CUDA trainer tests"
ab timeout 200 "$bin/unit_tests" \
  --gtest_filter='CudaModel*:CudaTrainer*:CudaCollective*:CrossBackendOps.*:OpsCuda.GlobalNorm*' \
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
rows = [l.strip().split(",") for l in open(sys.argv[1]) if l.count(",") >= 5]
ours = {r[1]: float(r[3]) for r in rows if r[0] == "attnsweep-cuda"}
for r in rows:
    if r[0].startswith("pytorch") and r[1] in ours:
        print(f"{r[1]}: attnsweep {ours[r[1]]:.0f} samples/s, {r[0]} {float(r[3]):.0f}, ratio {ours[r[1]] / float(r[3]):.2f}x")
PY
fi

if stage 4 && in_budget "attention and ops tests"; then
  say "4. the other CUDA tests (attention kernels, ops)"
  gtest_stage other_cuda "other CUDA tests" 200 \
    '*Cuda*-CudaModel*:CudaTrainer*:CudaCollective*:OpsCuda.GlobalNorm*:*AttentionCudaMma*'
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
  gtest_stage mma_tests "mma tests" 110 '*AttentionCudaMma*:HalfFloatHost*'
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

# 8. The trainer at the sizes of real sweeps (issue #20): tests, one samples/s table
# (ours fp32/bf16 against PyTorch eager fp32, eager AMP bf16, torch.compile AMP bf16,
# with per-step wall and kernel ms), then cells/GPU-hour of attnsweep run for K cells
# per GPU, without and with MPS. Every command under its own timeout, all inside
# STAGE8_BUDGET_S; the tables are printed at the end with whatever was measured.
if stage 8; then
  t8=$SECONDS
  s8_budget=${STAGE8_BUDGET_S:-230}
  left8() { echo $((s8_budget - (SECONDS - t8))); }
  # fits8 SECONDS WHAT: true when about SECONDS are left, else says what is skipped.
  fits8() { [ "$(left8)" -ge "$1" ] || { say "skipped: $2 (past STAGE8_BUDGET_S: $(left8) s left, needs ~$1 s)"; return 1; }; }
  cap8() { local l; l=$(left8); echo $((l < $1 ? (l > 1 ? l : 1) : $1)); }  # a timeout: at most $1, at most what is left
  # Its logs go to one archive in $OUT at the end (the device tool brings back 8 files):
  # $OUT/stage8_logs.tar.gz and $OUT/stage8_table.txt, the gist in summary.txt.
  s8=/tmp/stage8 && rm -rf "$s8" && mkdir -p "$s8/logs"
  l8=$s8/logs
  tlog=$l8/trainer.log && : > "$tlog"
  klog=$l8/k.csv && echo "grid,task,mps,k,complete,cells,wall_s" > "$klog"
  cells8="reference large listops2000 paperB1000"
  if [ "$rehearse" = 1 ]; then
    dev8=cpu
    export ATTNSWEEP_BENCH_WARMUP=1 ATTNSWEEP_BENCH_BATCH=4
    ours_steps() { echo 1; }
    pt_steps=1 pt_ktime=1 k_steps=4 k_eval='"eval_batches": 1' k_tests=16
  else
    dev8=cuda
    # About 0.4-3 s of steps each on the H200 (2026-11-29: the reference cell 2.1 ms a
    # step, the large cell 36 ms), twice: timed, then with the kernel timer. The stage's
    # estimate there, from those runs (stage 1's tests ~15 s, PyTorch eager ~9.5 ms a step
    # on the small cells and 28 ms on the large one, paperB_icl_cpu's cells 0.65-2.6 ms a
    # step plus ~1 s to start): tests ~20 s, ours ~20 s, PyTorch eager fp32 and AMP ~25 s,
    # the K sweep without MPS ~60 s (K = 1: 8 cells of ~2 s a grid), torch.compile
    # 60-120 s (capped to leave ~30 s), MPS ~30 s: about 230 s.
    ours_steps() { case $1 in reference) echo 200 ;; paperB1000) echo 400 ;; *) echo 40 ;; esac; }
    pt_steps=40 pt_ktime=5 k_steps=300 k_eval='"eval_batches": 0' k_tests=256
  fi

  say "8. CUDA trainer tests (CudaModel.*, CudaTrainer*)"
  if [ -x "$bin/unit_tests" ]; then
    ab timeout "$(cap8 90)" "$bin/unit_tests" --gtest_filter='CudaModel.*:CudaTrainer*' --gtest_brief=1 \
      --gtest_output="xml:$l8/tests.xml" > "$l8/tests.log" 2>&1
    rc=$?
    grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED|^\[  SKIPPED' "$l8/tests.log" | head -30 | tee -a "$summary"
    grep -m 20 -B2 -A6 'Failure' "$l8/tests.log" >> "$summary"
    say "8. CUDA trainer tests exit $rc (124: cut by the budget)"
    [ "$tests_rc" -eq 0 ] && tests_rc=$rc
  else
    say "8. no unit_tests binary: tests not run"
  fi

  say "8. ours: trainer_cpu, fp32 and bf16 ($dev8)"
  # fp32 and bf16, each op by op and with launch-free steps (ATTNSWEEP_CUDA_GRAPHS=1).
  for cell in $cells8; do
    for run in fp32 bf16 fp32+graphs bf16+graphs; do
      prec=${run%+graphs} graphs=0
      [ "$run" != "$prec" ] && graphs=1
      fits8 15 "ours $cell $run" || continue
      ab timeout "$(cap8 60)" env ATTNSWEEP_CUDA_GRAPHS=$graphs "$bin/trainer_cpu" 1 "$(ours_steps "$cell")" \
        softmax "$cell" "$dev8" "$prec" >> "$tlog" 2>&1
      rc=$?
      [ "$rc" -ne 0 ] && echo "# ours $cell $run exit $rc" >> "$tlog"
    done
  done
  # PyTorch: one process per variant, the cells one after another (each line printed
  # when done: a timeout keeps the finished cells' lines).
  all_cells=${cells8// /,}
  # torch.compile comes after the K sweep without MPS: its compilation takes what is left.
  for variant in "eager fp32|" "eager bf16|--amp bf16"; do
    name=${variant%%|*} flags=${variant#*|}
    fits8 25 "PyTorch $name" || continue
    say "8. PyTorch $name"
    # shellcheck disable=SC2086
    timeout "$(cap8 90)" "$py" bench/trainer_cpu.py 1 "$pt_steps" --cell "$all_cells" --device "$dev8" --attn sdpa \
      --kernel-time "$pt_ktime" $flags >> "$tlog" 2>> "$l8/torch.err"
    rc=$?
    [ "$rc" -ne 0 ] && echo "# pytorch $name exit $rc" >> "$tlog" && tail -3 "$l8/torch.err" | tee -a "$summary"
  done

  # cells/GPU-hour: two small grids written here, each run with K = 1, 2, 4, 8 cells per
  # GPU (8 cells: K = 8 runs them all at once). Fashion-MNIST where the image task finds
  # it (ATTNSWEEP_FASHION_MNIST_DIR, else /usr/share/datasets/fashion-mnist), else the same
  # model on generated ListOps at N 16 (no download).
  fm=${ATTNSWEEP_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  if [ "${STAGE8_NO_FMNIST:-0}" != 1 ] && [ -f "$fm/train-images-idx3-ubyte.gz" ] && [ -f "$fm/t10k-images-idx3-ubyte.gz" ]; then
    small_task=image small_keys=''
  else
    small_task=listops small_keys='"n_test": 256, "depth": 3, "arity": 4, '
  fi
  say "8. K sweep: paperA_fmnist-like N 16 cells on task $small_task ($([ "$small_task" = image ] && echo "Fashion-MNIST from $fm" || echo "no Fashion-MNIST at $fm: generated ListOps instead")), and paper B cells"
  cat > "$s8/small16.json" <<JSON
{"name": "stage8_small16", "description": "gpu-check stage 8: paperA_fmnist's model at N 16 (dim 64, 4 layers, 4 heads, MLP 4x, batch 128, AdamW lr 2e-3), $k_steps steps, 8 cells",
 "axes": {"task": ["$small_task"], "activation": ["softmax", "poly"], "prompt_length": [16], "seed": [0, 1, 2, 3]},
 "fixed": {${small_keys}"degree": 3, "scale": "inv_sqrt_n", "dim": 64, "layers": 4, "heads": 4, "mlp_ratio": 4,
           "steps": $k_steps, "batch": 128, "lr": 2e-3, "warmup_steps": 10, "log_every": 25, "eval_every": 0, $k_eval}}
JSON
  cat > "$s8/paperB8.json" <<JSON
{"name": "stage8_paperB8", "description": "gpu-check stage 8: paperB_icl's read-out (softmax vs linear, SGD lr 1e-3, batch 128) at L 10, 100, 500, 1000, $k_steps steps, 8 cells",
 "axes": {"task": ["icl_regression"], "activation": ["softmax", "poly"], "prompt_length": [10, 100, 500, 1000]},
 "fixed": {"degree": 1, "scale": "inv_n", "init_seed": 0, "seed": 0, "steps": $k_steps, "batch": 128, "lr": 0.001,
           "optimizer": "sgd", "lr_schedule": "constant", "eval_every": 0, "log_every": 100, "test_prompts": $k_tests}}
JSON
  k_refused=0 k_said=0
  # krun G MPS K ARGS...: one attnsweep run of grid G into a fresh folder; sets rc, wall.
  krun() {
    local g=$1 mps=$2 k=$3 t0 t1
    shift 3
    rm -rf "$s8/run-$g-$mps-$k"
    t0=$(date +%s.%N)
    ab timeout "$(cap8 60)" "$bin/attnsweep" run "$s8/$g.json" --out "$s8/run-$g-$mps-$k" "$@" --retries 0 \
      --progress-every-s 60 > "$l8/run-$g-$mps-$k.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  }
  # ksweep MPS K...: both grids at each K, one line each in $klog. K = 1 runs without
  # --cells-per-gpu (its default), so it works with an attnsweep that lacks the flag.
  ksweep() {
    local mps=$1 k g log fin complete cells
    shift
    for k in "$@"; do
      for g in small16 paperB8; do
        [ "$k" -gt 1 ] && [ "$k_refused" = 1 ] && continue
        fits8 $((k == 1 ? 25 : 12)) "K=$k $g (mps $mps)" || continue
        log=$l8/run-$g-$mps-$k.log
        kargs=(--device "$dev8")
        [ "$k" -gt 1 ] && kargs+=(--cells-per-gpu "$k")
        [ "$rehearse" = 1 ] && kargs+=(--workers "$k" --threads 1)
        krun "$g" "$mps" "$k" "${kargs[@]}"
        if [ "$rc" -eq 2 ] && grep -q -- 'cells-per-gpu' "$log"; then
          if [ "$rehearse" = 1 ]; then
            # On the CPU the flag is refused either way (unknown, or no GPU to share):
            # CPU slots (--workers K) stand in for K cells per GPU.
            [ "$k_said" = 1 ] || say "8. rehearsal: --cells-per-gpu refused as on any CPU ($(grep -m1 -- 'cells-per-gpu' "$log" | cut -c1-120)); --workers K stands in"
            k_said=1
            krun "$g" "$mps" "$k" --device cpu --workers "$k" --threads 1
          else
            say "8. attnsweep run refused --cells-per-gpu $k: $(grep -m1 -- 'cells-per-gpu' "$log" | cut -c1-160); K > 1 not measured"
            k_refused=1
            continue
          fi
        fi
        fin=$(grep -m1 'finished:' "$log")
        complete=$(sed -nE 's/.* ([0-9]+) complete.*/\1/p' <<< "$fin")
        cells=$(sed -nE 's/.*finished: ([0-9]+) cells.*/\1/p' <<< "$fin")
        echo "$g,$([ "$g" = small16 ] && echo "$small_task" || echo icl_regression),$mps,$k,${complete:-0},${cells:-8},$wall" >> "$klog"
        say "8. K=$k $g mps=$mps: exit $rc, ${complete:-0} of ${cells:-?} complete in $wall s"
      done
    done
  }
  ksweep no 1 2 4 8

  # compilation takes what is left but ~30 s for MPS; paperB1000 last (the done-when
  # compares the other three).
  fits8 40 "PyTorch compile bf16" && {
    say "8. PyTorch torch.compile bf16 (compiles each cell: the slowest part)"
    l=$(($(left8) - 30))
    timeout $((l < 150 ? (l > 30 ? l : 30) : 150)) "$py" bench/trainer_cpu.py 1 "$pt_steps" --cell "$all_cells" --device "$dev8" --attn sdpa \
      --kernel-time "$pt_ktime" --compile --amp bf16 >> "$tlog" 2>> "$l8/torch.err"
    rc=$?
    [ "$rc" -ne 0 ] && echo "# pytorch compile bf16 exit $rc" >> "$tlog" && tail -3 "$l8/torch.err" | tee -a "$summary"
  }

  # With CUDA MPS: one control daemon, its pipe and log folders under /tmp, quit after.
  if [ "$rehearse" = 1 ]; then
    say "8. MPS: not in the rehearsal (no GPU)"
  elif [ "$k_refused" = 1 ]; then
    say "8. MPS: skipped (--cells-per-gpu refused)"
  elif ! command -v nvidia-cuda-mps-control > /dev/null; then
    say "8. MPS: no nvidia-cuda-mps-control on PATH: K sweep without MPS only"
  elif fits8 30 "K sweep with MPS"; then
    mpsdir=$(mktemp -d /tmp/mps-stage8.XXXXXX)
    export CUDA_MPS_PIPE_DIRECTORY=$mpsdir/pipe CUDA_MPS_LOG_DIRECTORY=$mpsdir/log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    mps_stop() {
      echo quit | timeout 20 nvidia-cuda-mps-control > /dev/null 2>&1
      cp "$CUDA_MPS_LOG_DIRECTORY"/*.log "$l8/" 2> /dev/null
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      rm -rf "$mpsdir"
      trap - EXIT
    }
    if timeout 20 nvidia-cuda-mps-control -d; then
      trap mps_stop EXIT
      say "8. MPS daemon started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
      ksweep mps 2 4 8  # K = 1 is one client: the no-MPS row's K = 1 is its base
      mps_stop
      say "8. MPS daemon quit (its control.log and server.log are in stage8_logs.tar.gz)"
    else
      say "8. MPS: nvidia-cuda-mps-control -d failed: K sweep without MPS only"
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
      rm -rf "$mpsdir"
    fi
  fi

  grep -v '^W\|Warning\|warn' "$tlog" >> "$summary"
  say "8. the table ($dev8$([ "$rehearse" = 1 ] && echo ', REHEARSAL: tiny steps and batches on the CPU, the figures mean nothing'))"
  "$py" - "$tlog" "$klog" <<'PY' 2>&1 | tee -a "$summary" | tee "$out/stage8_table.txt"
import csv, math, re, sys

lines = [l.strip() for l in open(sys.argv[1])]
rows = [l.split(",") for l in lines if not l.startswith("#") and l.count(",") >= 9]
cells = ["reference", "large", "listops2000", "paperB1000"]
what = {"reference": "reference (N 49, dim 64, 4 layers, batch 128)", "large": "large (N 196, dim 256, 6 layers)",
        "listops2000": "ListOps N 2000 padded (2 layers, dim 64, 2 heads, batch 32)",
        "paperB1000": "paper B read-out L 1000 (C 6, SGD, batch 128)"}
cols = ["ours fp32", "ours bf16", "ours fp32+graphs", "ours bf16+graphs", "eager fp32", "eager bf16", "compile bf16"]
n_ours = 4
got, ms = {}, {}  # (cell, col) -> samples/s; -> (wall, kernel) ms
attn = set()
for r in rows:
    cell = r[1].split("-", 1)[1] if "-" in r[1] else "reference"
    if r[0].startswith("attnsweep"):
        col = "ours " + r[6]
    elif r[0].startswith("pytorch"):
        col = ("compile " if "compiled" in r[0] else "eager ") + r[6]
        attn.add(r[10] if len(r) > 10 else "?")
    else:
        continue
    got[cell, col] = float(r[3])
    ms[cell, col] = (float(r[7]), float(r[8]))
# Why a figure is missing: "# ours CELL PREC exit RC", "# pytorch VARIANT PREC exit RC".
why = {}
for l in lines:
    m = re.match(r"# ours (\S+) (\S+) exit (\d+)", l)
    if m:
        why[m[1], "ours " + m[2]] = "exit " + m[3]
    m = re.match(r"# pytorch (eager|compile) (\S+) exit (\d+)", l)
    if m:
        for c in cells:
            why.setdefault((c, m[1] + " " + m[2]), "exit " + m[3])


def num(c, k):
    if (c, k) in got:
        return f"{got[c, k]:,.0f}"
    return f"— ({why[c, k]})" if (c, k) in why else "—"


def f3(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.3g}"


def wk(c, k):
    if (c, k) not in ms:
        return "—"
    w, kern = ms[c, k]
    return f"{f3(w)} / {f3(kern)}" if not math.isnan(kern) else f"{f3(w)} / n/a"


print("samples/s; ms per step as wall / kernel (wall - kernel = host overhead); PyTorch attention: "
      + (", ".join(sorted(attn)) or "—") + "; — (exit N): that run's exit status (124: its timeout)")
head = ["cell"] + cols + ["best ours / fastest PyTorch", "ours fp32 ms", "ours bf16 ms", "ours fp32+graphs ms",
                          "fastest PyTorch ms"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for c in cells:
    ours = [got[c, k] for k in cols[:n_ours] if (c, k) in got]
    pt = {k: got[c, k] for k in cols[n_ours:] if (c, k) in got}
    fast = max(pt, key=pt.get) if pt else None
    ratio = f"{max(ours) / pt[fast]:.2f}× ({fast})" if ours and fast else "—"
    print("| " + " | ".join([what[c]] + [num(c, k) for k in cols] +
                            [ratio, wk(c, "ours fp32"), wk(c, "ours bf16"), wk(c, "ours fp32+graphs"),
                             wk(c, fast) if fast else "—"]) + " |")
krows = list(csv.DictReader(open(sys.argv[2])))
if krows:
    print()
    print("cells per GPU-hour of attnsweep run (8 cells a grid): complete cells / wall of the whole run x 3600, "
          "and the ratio to K = 1 without MPS")
    print("| grid | task | MPS | K = 1 | K = 2 | K = 4 | K = 8 |")
    print("|---|---|---|---|---|---|---|")
    rate = {}
    for r in krows:
        if float(r["wall_s"]) > 0:
            rate[r["grid"], r["mps"], int(r["k"])] = (int(r["complete"]) / float(r["wall_s"]) * 3600, r)
    for g in dict.fromkeys(r["grid"] for r in krows):
        base = rate.get((g, "no", 1), (None,))[0]
        for mps in dict.fromkeys(r["mps"] for r in krows if r["grid"] == g):
            out = []
            for k in (1, 2, 4, 8):
                if (g, mps, k) not in rate:
                    out.append("—")
                    continue
                v, r = rate[g, mps, k]
                note = "" if r["complete"] == r["cells"] else f" ({r['complete']} of {r['cells']} complete)"
                x = f", {v / base:.2f}×" if base and (k > 1 or mps != "no") else ""
                out.append(f"{v:,.0f}{x}{note}")
            task = next(r["task"] for r in krows if r["grid"] == g)
            print(f"| {g} | {task} | {mps} | " + " | ".join(out) + " |")
PY
  cp "$s8"/*.json "$l8/" && tar -C "$s8" -czf "$out/stage8_logs.tar.gz" logs
  say "8. done in $((SECONDS - t8)) s (STAGE8_BUDGET_S $s8_budget)"
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
# l1000_variants NAME STEPS "ACTS" VARIANT...: paper B's L = 1000 cell of each activation
# in ACTS (from paperB_icl_paired.json's plan) trained for STEPS steps (REHEARSE=1: 200, on
# the CPU) once per VARIANT "label:VAR=value[,VAR=value...]" (the environment it runs in),
# in /tmp/NAME (the training log to $out/NAME_train.log), then a table: ms a step of each and
# as a multiple of the first variant's, whether every dataset of the result file is
# bit-identical to the first variant's, and the final metrics side by side.
cell_dev=cuda
# A rehearsal with an emulated-device build (BUILD_DIR=build-emu) runs the CUDA code on the
# emulated GPU, so the commands run the same path they will on the device; any other
# build rehearses on the CPU.
if [ "$rehearse" = 1 ] && ! grep -q "^ATTNSWEEP_CUDA:STRING=EMULATE" "$build/CMakeCache.txt" 2>/dev/null; then
  cell_dev=cpu
fi
l1000_variants() {
  local dir=/tmp/$1 steps=$2 acts=$3 name=$1 act v label
  shift 3
  [ "$rehearse" = 1 ] && steps=200
  rm -rf "$dir" && mkdir -p "$dir"
  ab "$bin/attnsweep" plan experiments/grids/paperB_icl_paired.json --json > "$dir/plan.json" 2>> "$dir/train.log"
  for act in $acts; do
    "$py" - "$act" "$steps" "$dir" <<'PY'
import json, sys
act, steps, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
cells = json.load(open(f"{d}/plan.json"))["cells"]
c = next(c["config"] for c in cells if c["config"]["prompt_length"] == 1000 and c["config"]["activation"] == act)
c.update(steps=steps, eval_every=steps, checkpoint_every=0, log_every=100)
json.dump(c, open(f"{d}/{act}.json", "w"))
PY
    for v in "$@"; do
      label=${v%%:*}
      (
        IFS=,
        for e in ${v#*:}; do export "${e?}"; done
        ab timeout 25 "$bin/attnsweep" train "$dir/$act.json" --out "$dir/$act-$label.h5" --device "$cell_dev"
      ) >> "$dir/train.log" 2>&1
      echo "$act $label exit $?" >> "$dir/train.log"
    done
  done
  "$py" - "$dir" "$steps" "$acts" "$@" <<'PY'
import sys, h5py, numpy as np
d, steps, acts, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), [v.split(":")[0] for v in sys.argv[4:]]
def datasets(f):
    out = {}
    f.visititems(lambda name, o: out.__setitem__(name, o[()]) if isinstance(o, h5py.Dataset) else None)
    return out
for act in acts:
    row = {}
    for v in variants:
        try:
            with h5py.File(f"{d}/{act}-{v}.h5", "r") as f:
                row[v] = (float(f.attrs["wall_seconds"]), {k: float(x) for k, x in f["final"].attrs.items()},
                          f.attrs.get("device", "?"), datasets(f))
        except Exception as e:
            print(f"{act} {v}: {e!r}")
    if variants[0] not in row:
        continue
    w0, f0, dev, ds0 = row[variants[0]]
    print(f"{act} L 1000, {steps} steps on {dev}: {variants[0]} {1e3 * w0 / steps:.3f} ms a step")
    for v in variants[1:]:
        if v not in row:
            continue
        w, fv, _, ds = row[v]
        same = ds.keys() == ds0.keys() and all(np.array_equal(ds[k], ds0[k], equal_nan=True) for k in ds0)
        print(f"  {v}: {1e3 * w / steps:.3f} ms a step ({w / w0:.2f}x {variants[0]}'s), datasets bit-identical "
              f"to {variants[0]}'s: {'yes' if same else 'NO'}")
        for k in sorted(set(f0) & set(fv)):
            print(f"    {k}: {variants[0]} {f0[k]:.6g}, {v} {fv[k]:.6g}")
PY
  cp "$dir/train.log" "$out/${name}_train.log"
}

# 9. The read-out in its own algebra on CUDA (issue #28, only when asked: STAGES=9, under
# 2 minutes): its tests (ReadoutAlgebraCuda.*: against the CPU's op sequence for every
# activation, 1-3 heads, L up to 3000; 16 cells in one launch against each alone), then one
# paper B cell (L = 1000, softmax and linear) trained for STAGE9_STEPS steps on the GPU
# with the algebra and with the op sequence (ATTNSWEEP_READOUT_ALGEBRA=0): ms a step of
# each, and their final metrics side by side (the same to about 1e-4, not bit-identical).
# REHEARSE=1 runs it on the CPU (--device cpu, 200 steps): the commands and the table only.
if stage 9; then
  t9=$SECONDS
  say "9. read-out algebra on CUDA: tests (ReadoutAlgebraCuda.*)"
  gtest_stage readout_cuda "read-out CUDA tests" 60 'ReadoutAlgebraCuda.*'
  l1000_variants readout_cuda "${STAGE9_STEPS:-3000}" "softmax poly" \
    ops:ATTNSWEEP_READOUT_ALGEBRA=0 algebra:ATTNSWEEP_READOUT_ALGEBRA=1 2>&1 | tee -a "$summary"
  say "9. done in $((SECONDS - t9)) s"
fi

# 10. Training prompts made on the device (issue #28, only when asked: STAGES=10, under 2
# minutes): the tests (IclPromptsCuda.*: normals and whole prompts bit for bit against the
# CPU's; cells on device-made batches against host-made ones, op by op and in step graphs,
# bit-identical), then paper B's L = 1000 softmax cell for STAGE10_STEPS steps with host
# batches and with device batches (ATTNSWEEP_CUDA_DEVICE_BATCHES=1), op by op and in step
# graphs (ATTNSWEEP_CUDA_GRAPHS=1): ms a step, and every dataset bit-identical to the host
# batches' run; then a group of 16 against one cell a process (below). REHEARSE=1: on the
# CPU, where the switches change nothing.
if stage 10; then
  t10=$SECONDS
  say "10. device-made prompts and groups: tests (IclPromptsCuda.*, CellGroupCuda.*)"
  gtest_stage icl_prompts_cuda "device prompt and group tests" 60 'IclPromptsCuda.*:CellGroupCuda.*'
  l1000_variants icl_prompts_cuda "${STAGE10_STEPS:-3000}" softmax \
    host:ATTNSWEEP_CUDA_DEVICE_BATCHES=0 device:ATTNSWEEP_CUDA_DEVICE_BATCHES=1 \
    host-graphs:ATTNSWEEP_CUDA_DEVICE_BATCHES=0,ATTNSWEEP_CUDA_GRAPHS=1 \
    device-graphs:ATTNSWEEP_CUDA_DEVICE_BATCHES=1,ATTNSWEEP_CUDA_GRAPHS=1 2>&1 | tee -a "$summary"
  g10=/tmp/s10 && rm -rf "$g10" && mkdir -p "$g10"
  # Cells trained as one on the GPU: paper B's 16 cells of L = 1000 and data seed 0 (8
  # initialisations x softmax, linear) for STAGE10_GROUP_STEPS steps on one GPU slot, as one
  # group (--fuse 16) and one cell a process (--fuse 1), both on device-made batches: the
  # wall time of each run and whether their 16 result files are identical.
  gsteps=${STAGE10_GROUP_STEPS:-1000}
  [ "$rehearse" = 1 ] && gsteps=100
  "$py" - "$gsteps" "$g10/group16.json" <<'PY'
import json, sys
g = json.load(open("experiments/grids/paperB_icl_paired.json"))
g["name"] = "gpu_check_group16"
g["axes"].update(prompt_length=[1000], seed=[0])
steps = int(sys.argv[1])
g["fixed"].update(steps=steps, eval_every=steps, log_every=100, checkpoint_every=0)
json.dump(g, open(sys.argv[2], "w"))
PY
  for f in 16 1; do
    t=$SECONDS
    ATTNSWEEP_CUDA_DEVICE_BATCHES=1 ab timeout 100 "$bin/attnsweep" run "$g10/group16.json" --out "$g10/fuse$f" \
      --fuse "$f" --device "$cell_dev" --workers 1 > "$out/group16_fuse$f.log" 2>&1
    say "10. 16 cells x $gsteps steps, --fuse $f: exit $?, $((SECONDS - t)) s"
  done
  "$py" scripts/compare_results.py "$g10/fuse16" "$g10/fuse1" 2>&1 | tail -3 | tee -a "$summary"
  say "10. done in $((SECONDS - t10)) s"
fi
# 11. The emulated device checked against the real one (issue #39, only when asked:
# STAGES=11, under 1 minute): gpu_primitive_tests (tests/emulator/test_primitives.cu built
# with nvcc: mma.sync bf16/f16, ldmatrix .x4 and .trans, shuffles with widths, cp.async
# with a partial source, ex2.approx, each against the PTX ISA's lane maps written out by
# hand, the expectations the emulator passes in CI), then a few kernels' tests that the
# emulator runs in CI: the tensor-core forward and backward and the fused path at one
# shape each. Any failure here is a difference between the emulator and the GPU: read
# docs/cuda-emulator.md ("What it cannot tell") before trusting either. REHEARSE=1 (with
# BUILD_DIR=build-emu) runs the same on the emulated device.
if stage 11; then
  t11=$SECONDS
  if [ -x "$bin/gpu_primitive_tests" ] || [ -x "$bin/emulator_tests" ]; then
    prim=$bin/gpu_primitive_tests
    [ -x "$prim" ] || prim=$bin/emulator_tests
    ab timeout 40 "$prim" --gtest_filter='EmulatedPrimitives.*' > "$out/primitives.log" 2>&1
    rc=$?
    grep -E '^\[  FAILED|^\[==========\]|^\[  PASSED|Failure|Expected|Which is' "$out/primitives.log" | head -40 |
      tee -a "$summary"
    say "11. the emulator's primitives on this device: exit $rc"
    [ "$tests_rc" -eq 0 ] && tests_rc=$rc
  else
    say "11. no gpu_primitive_tests binary (bench/gpu-bundle.sh builds it)"
  fi
  gtest_stage emulated_kernels "11. kernels the emulator checks" 40 \
    'Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*:Shapes/AttentionCudaMmaBwd.BackwardMatchesCpu/softmax_q129_k129_d64*:Shapes/AttentionCuda.RefAndFusedMatchCpu/softmax_q129_k129_d64*'
  say "11. done in $((SECONDS - t11)) s"
fi
if stage 12; then
  t12=$SECONDS
  if [ "$rehearse" = 1 ]; then
    opdir=$build/python
    op_env=(DEVICE=cpu)
  else
    opdir=build-op/python
    op_env=()
    # shellcheck source=/dev/null
    [ -f .devdeps/setup.sh ] && source .devdeps/setup.sh
    tp=$($py -c 'import torch, os; print(os.path.dirname(torch.__file__))')
    if ! cmake -S . -B build-op -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DATTNSWEEP_TORCH_PREFIX="$tp" > "$out/op-configure.log" 2>&1 ||
       ! timeout 240 ninja -C build-op -j "$(nproc)" attnsweep_torch > "$out/op-build.log" 2>&1; then
      grep -m 20 -E "error|Error|torch" "$out/op-configure.log" "$out/op-build.log" | tee -a "$summary"
      say "12. the op did not build"
      opdir=""
    fi
    grep -m1 "PyTorch op" "$out/op-configure.log" | tee -a "$summary"
  fi
  if [ -n "$opdir" ]; then
    env "${op_env[@]}" ATTNSWEEP="$bin/attnsweep" PYTHONPATH="$opdir" LD_LIBRARY_PATH="$libpath" \
      timeout 200 "$py" tests/integration/torch_op_cuda.py > "$out/torch_op_cuda.log" 2>&1
    rc=$?
    grep -E "^(ok|FAIL|N )" "$out/torch_op_cuda.log" | head -40 | tee -a "$summary"
    say "12. the PyTorch op on this device: exit $rc in $((SECONDS - t12)) s"
    [ "$tests_rc" -eq 0 ] && tests_rc=$rc
  fi
fi
say "done, tests exit $tests_rc"
exit "$tests_rc"
