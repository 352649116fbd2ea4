#!/usr/bin/env bash
# Several cells per GPU (run --cells-per-gpu K, resources.cells_per_gpu): plan refuses a K
# whose cells cannot share one GPU's memory (resources.gpu_memory_gib here), naming the
# cell; CPU-slot runs ignore the grid's K and say so once; submit passes the flag to the
# job's run. The command-line errors (--device cpu with the flag, K out of range) are in
# tests/bad_inputs/commands.txt; the job script's MPS start and stop in slurm_job_mps.sh.
source "$(dirname "$0")/lib.bash"

# A large image cell: 64 of it cannot share a 1 GiB GPU.
cat >big.json <<'J'
{"axes": {"task": ["image"], "prompt_length": [16, 784]},
 "fixed": {"dim": 256, "heads": 4, "layers": 6, "batch": 128},
 "resources": {"cells_per_gpu": 64, "gpu_memory_gib": 1}}
J
sed 's/"gpu_memory_gib": 1}/"gpu_memory_gib": 141}/' big.json >fits.json
id=$("$ATTNSWEEP" plan fits.json --cells-per-gpu 1 --json |
  $PY -c 'import json,sys; c=json.load(sys.stdin)["cells"]; print(max(c, key=lambda x: x["est_gpu_memory_bytes"])["id"])')
run_rc "$ATTNSWEEP" plan big.json
check "plan refuses 64 cells per GPU of 1 GiB (exit 2)" test "$RC" = 2
for want in "big.json: cell $id (task image, prompt_length 784) needs about" "GiB of GPU memory" \
  "64 cells per GPU need" "more than the 1.0 GiB of resources.gpu_memory_gib"; do
  check "the message says '$want' ($ERR)" grep -qF -- "$want" <<<"$ERR"
done
check "and prints no plan" test -z "$OUT"
run_rc "$ATTNSWEEP" plan fits.json --cells-per-gpu 64
check "plan refuses --cells-per-gpu 64 on 141 GiB too, saying the K that fits ($ERR)" \
  grep -q "lower cells_per_gpu (--cells-per-gpu) to at most [0-9]" <<<"$ERR"
run_rc "$ATTNSWEEP" plan fits.json --cells-per-gpu 4
check "plan accepts 4 per GPU of 141 GiB" test "$RC" = 0
check "and its total line says what it checked ($(tail -1 <<<"$OUT"))" \
  grep -q "^2 cells .*GPU memory: 4 x .* fit in the 141.0 GiB of resources.gpu_memory_gib" <<<"$(tail -1 <<<"$OUT")"
# Without gpu_memory_gib on a machine without a GPU, plan says it did not check.
sed 's/, "gpu_memory_gib": 1}/}/' big.json >nomem.json
run_rc "$ATTNSWEEP" plan nomem.json
check "plan without a GPU memory to check against exits 0" test "$RC" = 0
check "and says whether it checked ($(tail -1 <<<"$OUT"))" grep -Eq "GPU memory not checked|GPU memory: .* of GPU 0" <<<"$(tail -1 <<<"$OUT")"

# CPU slots run one cell each: the grid's K is ignored, with one line saying so.
cat >cpu.json <<'J'
{"axes": {"task": ["synthetic"], "seed": [0, 1, 2]}, "fixed": {"seconds": 0.05},
 "resources": {"cells_per_gpu": 4}}
J
run_rc "$ATTNSWEEP" run cpu.json --out cpu --device cpu --workers 2
check "a grid with cells_per_gpu 4 runs on CPU slots (exit 0: $ERR)" test "$RC" = 0
check "saying once that resources.cells_per_gpu is ignored" \
  test "$(grep -c "resources.cells_per_gpu 4 is ignored: --device cpu" <<<"$ERR")" = 1
check "on 2 CPU slots" grep -q "2 cpu slots per rank" <<<"$ERR"
if [ "$("$ATTNSWEEP" plan nomem.json | grep -c "not checked")" = 1 ]; then  # no GPU visible
  run_rc "$ATTNSWEEP" run cpu.json --out auto --workers 2 --cells-per-gpu 2
  check "--cells-per-gpu 2 with --device auto and no GPU runs (exit 0: $ERR)" test "$RC" = 0
  check "saying once that it is ignored" \
    test "$(grep -c -- "--cells-per-gpu 2 is ignored: no GPU is visible" <<<"$ERR")" = 1
fi

# submit passes --cells-per-gpu to the job's run; the script knows the K it runs with.
run_rc "$ATTNSWEEP" submit cpu.json --out job3 --nodes 1 --gpus-per-node 2 --cells-per-gpu 3 --dry-run
check "submit --cells-per-gpu 3 --dry-run exits 0 ($ERR)" test "$RC" = 0
check "the job's run gets --cells-per-gpu 3" grep -q "^run=(.* run .*--device cuda.* --cells-per-gpu 3" job3/job.sbatch
check "and the script runs with K 3" grep -qx "cells_per_gpu=3" job3/job.sbatch
run_rc "$ATTNSWEEP" submit cpu.json --out job4 --nodes 1 --gpus-per-node 2 --dry-run
check "without the flag the run takes the grid's (no --cells-per-gpu)" bash -c '! grep -q "^run=(.*--cells-per-gpu" job4/job.sbatch'
check "and the script knows it is 4" grep -qx "cells_per_gpu=4" job4/job.sbatch
run_rc "$ATTNSWEEP" submit cpu.json --out job0 --nodes 1 --gpus-per-node 0 --dry-run
check "on CPU nodes the grid's K is 1 (no MPS)" grep -qx "cells_per_gpu=1" job0/job.sbatch
