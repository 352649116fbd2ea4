#!/usr/bin/env bash
# The emulated device's memory is the GPU's being emulated (an H100's 81,559 MiB by
# default, an H200's with ATTNSWEEP_EMULATED_GPU=h200) and cudaMalloc past it fails; and
# plan's GPU memory estimate of a cell (worker/model/gpu_memory.h) is checked against what
# the cell allocated on the emulated device (its peak): every task's cell. SKIPPED (77) on a build with no emulated device.
source "$(dirname "$0")/lib.bash"
grep -q "^ATTNSWEEP_CUDA:STRING=EMULATE" "$BUILD/CMakeCache.txt" 2>/dev/null || {
  echo "not an emulated-device build: skipped"
  exit 77
}
cat >every.json <<'J'
{"name": "emulated-memory",
 "axes": {"task": ["synthetic", "norm_probe", "image", "icl_regression", "listops", "pde"], "seed": [0]},
 "fixed": {"activation": "softmax", "dim": 32, "layers": 2, "heads": 2, "steps": 3, "batch": 16,
           "log_every": 1, "eval_every": 3, "eval_batches": 1, "prompt_length": 16, "warmup_steps": 1}}
J
run_rc "$ATTNSWEEP" plan every.json --json
check "plan --json with the emulated GPU visible (rc $RC: $ERR)" test "$RC" = 0
echo "$OUT" > plan.json
run_rc "$ATTNSWEEP" run every.json --out one --device cuda --workers 1
check "every task's cell runs on the emulated H100 (rc $RC: $ERR)" test "$RC" = 0
# Each cell again in a process of its own, which writes its device's peak at exit
# (emulator/runtime.cpp: ATTNSWEEP_EMULATED_MEMORY_REPORT=PREFIX -> PREFIX.<pid>.json).
mkdir -p peaks t
for cell in one/cells/*.json; do
  id=$(basename "$cell" .json)
  ATTNSWEEP_EMULATED_MEMORY_REPORT=$WORK/peaks/$id "$ATTNSWEEP" train "$cell" --out "t/$id.h5" --device cuda >/dev/null
done
check "plan's estimate of each cell covers what it allocated, and is not more than 2x that" $PY - plan.json peaks <<'PY'
import glob, json, os, sys
est = {c["id"]: c["est_gpu_memory_bytes"] for c in json.load(open(sys.argv[1]))["cells"]}
context = 512 << 20  # worker/model/gpu_memory.h kCudaContextBytes: the CUDA context, which the emulator has not
assert len(est) == 6, est
for cid, e in sorted(est.items()):
    (f,) = glob.glob(f"{sys.argv[2]}/{cid}.*.json")
    r = json.load(open(f))
    assert r["gpu"] == "H100 80GB HBM3" and r["total_bytes"] == 81559 << 20, r
    peak, need = r["peak_bytes"][0], e - context
    if e == 0:  # a cell that uses no GPU (norm_probe: no training) allocates nothing there
        assert peak == 0, f"cell {cid}: estimated to use no GPU memory, allocated {peak} B"
        continue
    print(f"cell {cid}: estimate {need / 2**20:.2f} MiB without the context, peak {peak / 2**20:.2f} MiB")
    assert 0 < peak <= need, f"cell {cid}: the estimate {need} B is below the peak {peak} B"
    assert need <= 2 * peak, f"cell {cid}: the estimate {need} B is more than twice the peak {peak} B"
PY
# A GPU too small for the cell: plan refuses it before anything runs, naming the emulated GPU.
ATTNSWEEP_EMULATED_GPU_MEMORY_MIB=64 run_rc "$ATTNSWEEP" plan every.json
check "plan refuses cells that do not fit the emulated GPU's 64 MiB (rc $RC: $OUT $ERR)" \
  bash -c "test '$RC' = 2 && grep -q 'H100 80GB HBM3' <<<\"\$1\"" _ "$OUT $ERR"
# cudaMalloc past the memory fails, as on a GPU: a cell run with the check bypassed fails
# naming the out-of-memory allocation (not a crash, not a success).
# (1 MiB: below the 2.3-2.5 MiB the image, listops and pde cells allocate here.)
ATTNSWEEP_EMULATED_GPU_MEMORY_MIB=1 run_rc "$ATTNSWEEP" run every.json --out small --device cuda --workers 1 \
  resources.gpu_memory_gib=1000 --retries 0
check "cells that do not fit fail (rc $RC)" test "$RC" = 1
check "their reason names the out-of-memory allocation" \
  grep -q "out of memory on emulated device 0 (H100 80GB HBM3, 1 MiB" small/logs/*.log
ATTNSWEEP_EMULATED_GPU=h200 run_rc "$ATTNSWEEP" plan every.json
check "ATTNSWEEP_EMULATED_GPU=h200: an H200's memory (rc $RC: $OUT)" grep -q "H200" <<<"$OUT"
ATTNSWEEP_EMULATED_GPU=a100 run_rc "$ATTNSWEEP" plan every.json
check "an unknown emulated GPU is refused (rc $RC: $ERR)" bash -c "test '$RC' != 0 && grep -q 'expected h100' <<<\"\$1\"" _ "$ERR"
