# A rank lost under srun (#22): the job script of `attnsweep submit`, run by a real
# one-node Slurm with three tasks (ranks) instead of one a node. One rank is stopped
# (SIGSTOP) mid-sweep: rank 0 loses it after the grid's rank_timeout_s, the other ranks
# finish every cell, and the run exits 75. srun does not pass that 75 on: PMIx ends the
# step once rank 0 has left, and srun reports the tasks it killed (137). The job script
# takes the run's own verdict from status.json, so the job still requeues itself; the
# requeued run checks every cell and ends COMPLETED, each cell finished exactly once.
source "$(dirname "$0")/../integration/lib.bash"
source "$(dirname "$0")/../integration/slurm_cluster.bash"
start_cluster

cat > g.json <<'JSON'
{"name": "srun-lost-rank", "axes": {"task": ["synthetic"], "seed": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29]}, "fixed": {"seconds": 0.5},
 "resources": {"rank_timeout_s": 3}}
JSON
run_rc "$ATTNSWEEP" submit g.json --out d --nodes 1 --gpus-per-node 0 --cpus-per-node 1 --time 00:10:00 --mpi pmix --dry-run
check "submit --dry-run exits 0 ($ERR)" test "$RC" = 0
# Three ranks on the one node (each with one CPU slot, overcommitted on a 2-core machine).
sed -i 's/^#SBATCH --ntasks-per-node=1$/#SBATCH --ntasks=3\n#SBATCH --overcommit/' d/job.sbatch
check "the job script asks for three tasks" grep -q '^#SBATCH --ntasks=3$' d/job.sbatch
job=$(sbatch --parsable d/job.sbatch)
check "sbatch printed a job id ($job)" grep -qE '^[0-9]+$' <<<"$job"

# The process of rank 2, once cells are being finished.
rank_pid() {
  local p
  for p in $(pgrep -f "$ATTNSWEEP run $WORK/d/grid.json" || true); do
    if tr '\0' '\n' </proc/"$p"/environ 2>/dev/null | grep -qx "PMIX_RANK=$1"; then echo "$p"; fi
  done
  return 0
}
victim=
for _ in $(seq 300); do
  victim=$(rank_pid 2)
  [ -n "$victim" ] && [ "$(ls d/runs/*.h5 2>/dev/null | wc -l)" -ge 3 ] && break
  sleep 0.1
done
check "rank 2 runs (pid $victim) and cells finish" test -n "$victim"
kill -STOP "$victim"
t_stop=$(date +%s)

# The requeue: Slurm counts it, then starts the job again.
wait_requeue "$job"
cat d/slurm-"$job".out
check "Slurm counted the requeue" bash -c "scontrol show job $job | grep -qE 'Restarts=[1-9]'"
check "within the rank timeout and the step's teardown ($(( $(date +%s) - t_stop )) s)" \
  test $(( $(date +%s) - t_stop )) -le 60
kill -CONT "$victim" 2>/dev/null || true  # Slurm has killed it with the step; if not, let it go
wait_restart "$job" d/slurm-"$job".out
check "the requeued job started again" grep -q "(restart 1)" d/slurm-"$job".out
wait_job "$job" 180
cat d/slurm-"$job".out
check "the first run named the lost rank" grep -q "rank 2 on host .* was lost" d/slurm-"$job".out
check "the job took the run's 75 and requeued itself" grep -q "requeueing $job" d/slurm-"$job".out
check "the job ended COMPLETED ($JOB_STATE)" test "$JOB_STATE" = COMPLETED
check "30 result files" test "$(ls d/runs/*.h5 | wc -l)" = 30
check "two runs, rank 2 lost in the first, each cell finished exactly once, every file valid" \
  $PY - d <<'PY'
import json, os, sys
import h5py
d = sys.argv[1]
ev = [json.loads(l) for l in open(os.path.join(d, "events.jsonl"))]
starts = [e for e in ev if e["event"] == "sweep_started"]
ends = [e for e in ev if e["event"] == "sweep_finished"]
assert len(starts) == 2 and len(ends) == 2, (len(starts), len(ends))
assert ends[0]["exit_code"] == 75 and [l["rank"] for l in ends[0]["lost_ranks"]] == [2], ends[0]
assert ends[1]["exit_code"] == 0 and ends[1]["complete"] == 30, ends[1]
lost = [e for e in ev if e["event"] == "rank_lost"]
assert len(lost) == 1 and lost[0]["rank"] == 2, lost
done = [e["cell_id"] for e in ev if e["event"] == "finished"]
assert sorted(done) == sorted(set(done)) and len(done) == 30, (len(done), len(set(done)))
for f in os.listdir(os.path.join(d, "runs")):
    with h5py.File(os.path.join(d, "runs", f), "r") as h:
        assert h.attrs["status"] == "complete", f
PY
