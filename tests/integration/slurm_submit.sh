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
