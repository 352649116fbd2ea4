# `attnsweep submit` through a real one-node Slurm (munge + slurmctld + slurmd started
# here): a small grid completes; then a job is sent USR1 mid-run (scancel --signal),
# exits 75, requeues itself, resumes, and finishes every cell exactly once.
source "$(dirname "$0")/lib.bash"
source "$(dirname "$0")/slurm_cluster.bash"
start_cluster

# 1. A small grid: norm-probe cells and synthetic cells.
cat > small.json <<'JSON'
{"name": "slurm-small",
 "axes": {"task": ["norm_probe"], "activation": ["softmax", "poly"], "degree": [3], "scale": ["inv_sqrt_n"],
          "prompt_length": [16, 64], "seed": [0]},
 "include": [{"task": "synthetic", "seed": 1, "seconds": 0.5}, {"task": "synthetic", "seed": 2, "crash_attempts": 1},
             {"task": "image", "prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 100, "batch": 16,
              "log_every": 10, "eval_every": 50, "seed": 0}],
 "resources": {"retries": 2}}
JSON
run_rc "$ATTNSWEEP" submit small.json --out small --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --time 00:10:00 --grace-s 10
check "submit exits 0 ($ERR)" test "$RC" = 0
job=$OUT
check "submit printed a job id ($job)" grep -qE '^[0-9]+$' <<<"$job"
wait_job "$job" 120
cat small/slurm-"$job".out
check "the job's run exited 0" grep -q "run exited 0" small/slurm-"$job".out
check "7 result files" test "$(ls small/runs/*.h5 | wc -l)" = 7
check "results record the Slurm job" $PY - small/runs "$job" <<'PY'
import glob, sys, h5py
for f in glob.glob(sys.argv[1] + "/*.h5"):
    with h5py.File(f) as h:
        assert h.attrs["status"] == "complete", f
        assert h.attrs["slurm_job_id"] == sys.argv[2], (f, h.attrs.get("slurm_job_id"))
        if "train" in h:  # the training cell: a trajectory and a test accuracy
            assert h["train/loss"].shape[0] == 11 and h["norms/attn_fro"].shape == (11, 1, 2)
            assert 0.1 < h["final"].attrs["test_accuracy"] <= 1.0
PY

# 1b. More sbatch options and set-up lines reach the job; node-local paths are warned
# about; a job script edited since submit wrote it is kept, never overwritten.
cat > tiny.json <<'JSON'
{"name": "slurm-tiny", "axes": {"task": ["synthetic"], "seed": [0, 1]}, "fixed": {"seconds": 0.2}}
JSON
run_rc "$ATTNSWEEP" submit tiny.json --out opts --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --time 00:10:00 \
  --sbatch=--comment=attnsweep-opts --setup 'export ATTNSWEEP_SETUP_SEEN=yes' --setup 'echo "setup: $ATTNSWEEP_SETUP_SEEN"'
check "submit with --sbatch and --setup exits 0 ($ERR)" test "$RC" = 0
job=$OUT
check "the --sbatch option reached Slurm" bash -c "scontrol show job $job | grep -q 'Comment=attnsweep-opts'"
check "--out under /tmp is warned about as node-local" grep -q "warning: --out (opts) is on /tmp, local to each node" <<<"$ERR"
wait_job "$job" 120
check "the set-up lines ran in the job, in order, before the run" bash -c \
  "grep -n 'setup: yes\|attnsweep job $job (restart 0)' opts/slurm-$job.out | head -1 | grep -q 'setup: yes'"
check "and the job finished" grep -q "run exited 0" opts/slurm-"$job".out
run_rc "$ATTNSWEEP" submit tiny.json --out opts --nodes 1 --gpus-per-node 0 --time 00:10:00 --dry-run
check "an unedited script is written again (rc $RC: $ERR)" test "$RC" = 0
echo '# edited by hand' >> opts/job.sbatch
run_rc "$ATTNSWEEP" submit tiny.json --out opts --nodes 1 --gpus-per-node 0 --time 00:10:00 --dry-run
check "an edited script is refused (rc $RC)" test "$RC" = 2
check "saying how to resubmit it: $ERR" grep -q "was edited since submit wrote it.*sbatch .*opts/job.sbatch" <<<"$ERR"
check "and kept as edited" grep -q '^# edited by hand$' opts/job.sbatch
run_rc "$ATTNSWEEP" submit tiny.json --out opts2 --nodes 1 --gpus-per-node 0 --time 00:10:00 --dry-run --sbatch=--nodes=2
check "an option the script sets is refused (rc $RC)" test "$RC" = 2
check "naming the flag to use instead: $ERR" grep -q "set by the job script: use submit's --nodes" <<<"$ERR"
run_rc "$ATTNSWEEP" submit tiny.json --out opts3 --nodes 1 --gpus-per-node 4 --time 00:10:00 --dry-run --sbatch=--gres=gpu:h100:2
check "a --gres GPU count other than --gpus-per-node is refused (rc $RC)" test "$RC" = 2
run_rc "$ATTNSWEEP" submit tiny.json --out opts4 --nodes 1 --gpus-per-node 4 --time 00:10:00 --dry-run \
  --sbatch=--gres=gpu:h100:4 --sbatch=--mem=64G
check "--gres names the GPUs instead of --gpus-per-node" bash -c \
  "grep -qx '#SBATCH --gres=gpu:h100:4' opts4/job.sbatch && grep -qx '#SBATCH --mem=64G' opts4/job.sbatch && ! grep -q '^#SBATCH --gpus-per-node' opts4/job.sbatch"
# A time limit Slurm reads as shorter than the warning signal, an option without its
# value, and the help's defaults (#52).
run_rc "$ATTNSWEEP" submit tiny.json --out opts5 --nodes 1 --gpus-per-node 0 --time 1:00 --dry-run
check "--time 1:00 (60 s, not more than --grace-s 120) is refused (rc $RC: $ERR)" \
  grep -q -- "--time 1:00: Slurm reads it as 60 s, not more than --grace-s 120" <<<"$ERR"
run_rc "$ATTNSWEEP" submit tiny.json --out opts5 --nodes 1 --gpus-per-node 0 --time 25:00 --dry-run
check "--time 25:00 is taken (rc $RC: $ERR)" test "$RC" = 0
check "with a note that it is 25 min: $ERR" grep -q "is 25 min in Slurm" <<<"$ERR"
run_rc "$ATTNSWEEP" submit tiny.json --out opts6 --nodes 1 --gpus-per-node 0 --time 00:10:00 --dry-run --sbatch=--qos
check "--sbatch=--qos without a value is refused (rc $RC: $ERR)" grep -q -- "--qos: expected a value: --qos=VALUE" <<<"$ERR"
"$ATTNSWEEP" submit --help >submit_help.txt
check "submit --help shows no (=0) default beside --cpus-per-node's (default 2)" bash -c "! grep -q 'cpus-per-node arg (=0)' submit_help.txt"

# 2. Preemption: USR1 mid-run -> exit 75 -> requeue -> resume -> each cell finished once.
cat > long.json <<'JSON'
{"name": "slurm-preempt", "axes": {"task": ["synthetic"], "seed": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},
 "fixed": {"seconds": 1.5},
 "include": [{"task": "image", "activation": "poly", "degree": 3, "scale": "inv_sqrt_n", "prompt_length": 16,
              "layers": 1, "heads": 2, "dim": 16, "steps": 30000, "batch": 32, "log_every": 50, "eval_every": 5000,
              "seed": 0}]}
JSON
run_rc "$ATTNSWEEP" submit long.json --out long --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --time 00:10:00 --grace-s 10
check "second submit exits 0" test "$RC" = 0
job=$OUT
# Wait until a few cells are done, then preempt.
for _ in $(seq 300); do
  [ "$(ls long/runs/*.h5 2>/dev/null | wc -l)" -ge 3 ] && break
  sleep 0.1
done
check "cells were running before the signal" test "$(ls long/runs/*.h5 | wc -l)" -ge 3
scancel --signal=USR1 --full "$job"
wait_requeue "$job"
check "Slurm counted the requeue" bash -c "scontrol show job $job | grep -qE 'Restarts=[1-9]'"
wait_restart "$job" long/slurm-"$job".out
check "the requeued job started again" grep -q "(restart 1)" long/slurm-"$job".out
wait_job "$job" 180
cat long/slurm-"$job".out
check "the interrupted run exited 75" grep -q "run exited 75" long/slurm-"$job".out
check "the job requeued itself" grep -q "requeueing $job" long/slurm-"$job".out
check "the job ended COMPLETED ($JOB_STATE)" test "$JOB_STATE" = COMPLETED
check "the requeued job finished (exit 0)" grep -q "run exited 0" long/slurm-"$job".out
check "17 result files" test "$(ls long/runs/*.h5 | wc -l)" = 17
check "two runs, each cell finished exactly once, some preempted" $PY - long/events.jsonl <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
starts = [e for e in ev if e["event"] == "sweep_started"]
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
pre = [e for e in ev if e["event"] == "preempted"]
print(f"{len(starts)} runs, {len(fin)} cells finished, max {max(fin.values())} per cell, {len(pre)} preempted attempts")
assert len(starts) == 2 and len(fin) == 17 and max(fin.values()) == 1 and len(pre) >= 1
stopped = [e for e in ev if e["event"] == "sweep_finished"]
assert [e["exit_code"] for e in stopped] == [75, 0], stopped
PY

# The training cell was stopped mid-run, checkpointed, and resumed by the requeued job;
# its result is bit-identical to an uninterrupted run of the same cell (same threads).
train_id=$(basename "$(grep -l '"task": "image"' long/cells/*.json)" .json)
check "the training cell was preempted" grep -q "\"event\":\"preempted\".*$train_id\|$train_id.*\"event\":\"preempted\"" long/events.jsonl
check "and resumed from its checkpoint" grep -q "resuming from" long/logs/$train_id.log
check "no checkpoint left behind" test ! -e long/checkpoints/$train_id.ckpt
"$ATTNSWEEP" train long/cells/$train_id.json --out uninterrupted.h5 --threads 1 >/dev/null
check "resumed training cell is bit-identical to an uninterrupted run" $PY - long/runs/$train_id.h5 uninterrupted.h5 <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
names = []
a.visit(lambda n: names.append(n) if isinstance(a[n], h5py.Dataset) else None)
assert any(n.startswith("norms/") for n in names) and "train/loss" in names, names
for n in names:
    x, y = a[n][()], b[n][()]
    assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), n
assert dict(a["final"].attrs) == dict(b["final"].attrs)
print(f"{len(names)} datasets identical byte for byte; {a['train/step'].shape[0]} logged steps")
PY

# 3. A PMI mismatch (srun starts 2 tasks, MPI is not started through srun) is refused.
run_rc srun -n 2 --mpi=none "$ATTNSWEEP" run small.json --out mismatch --workers 1
check "srun --mpi=none with 2 tasks fails (rc $RC)" test "$RC" != 0
check "and says why: $ERR" grep -q "srun started 2 tasks but MPI sees 1 rank" <<<"$ERR"
check "nothing was run" test ! -e mismatch/runs

# 4. Own code (docs/own-code.md): the PyTorch example's grid, made tiny, through submit.
$PY - "$SRC/examples/own_code/vit_fmnist.json" "$SRC" own.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["command"]["argv"][1] = sys.argv[2] + "/" + g["command"]["argv"][1]
g["fixed"] = {"steps": 10, "batch": 16, "n_train": 256, "n_test": 128, "dim": 16, "layers": 1, "log_every": 5}
json.dump(g, open(sys.argv[3], "w"))
PY
run_rc "$ATTNSWEEP" submit own.json --out own --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --time 00:10:00 --grace-s 10
check "submit of the own-code grid exits 0 ($ERR)" test "$RC" = 0
job=$OUT
wait_job "$job" 300
cat own/slurm-"$job".out
check "the own-code job's run exited 0" grep -q "run exited 0" own/slurm-"$job".out
check "its 8 command cells are complete, with the job in their results" $PY - own/runs "$job" <<'PY'
import glob, sys, h5py
files = glob.glob(sys.argv[1] + "/*.h5")
assert len(files) == 8, files
for f in files:
    with h5py.File(f) as h:
        assert h.attrs["status"] == "complete" and h.attrs["slurm_job_id"] == sys.argv[2], f
        assert list(h["train/step"][()]) == [0, 5, 9] and 0 <= h["final"].attrs["test_accuracy"] <= 1, f
PY
