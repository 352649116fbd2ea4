#!/usr/bin/env bash
# `attnsweep submit --nodes 3` on a real 3-node Slurm (tests/hosts/slurm.bash: slurmctld
# on h1, one slurmd a host, each host a network namespace with a node-local TMPDIR). The
# generated job script runs through the real sbatch and srun (--mpi=pmix, one rank a
# node, TCP between the hosts). With K = 2 cells per GPU the script's per-node set-up
# (CUDA MPS, here the stand-in daemon of tests/integration/slurm_job_mps.sh) runs once
# on each node, in that node's own TMPDIR, and is quit and removed there at the end; the
# cells run on CPU slots (the script's GPU request and --device cuda are edited out:
# there is no GPU). The job completes, cells ran on all 3 nodes, each once.
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../integration/lib.bash
source "$HERE/../integration/lib.bash"
# shellcheck source=hosts.bash
source "$HERE/hosts.bash"
# shellcheck source=grids.bash
source "$HERE/grids.bash"
# shellcheck source=slurm.bash
source "$HERE/slurm.bash"
hosts_up 3
slurm_up
mkdir bin
cat >bin/nvidia-cuda-mps-control <<'S'
#!/bin/bash
# Stand-in MPS control daemon: records each start and quit with the node and its folders.
if [ "${1:-}" = -d ]; then
  echo "start host=$(hostname) tmpdir=$TMPDIR pipe=$CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_LOG"
  test -d "$CUDA_MPS_PIPE_DIRECTORY" && test -d "$CUDA_MPS_LOG_DIRECTORY"
else
  echo "control $(cat) host=$(hostname) pipe=$CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_LOG"
fi
S
chmod +x bin/nvidia-cuda-mps-control
grid_synthetic grid.json 18 0.3
"$ATTNSWEEP" submit grid.json --out job --nodes 3 --gpus-per-node 1 --cells-per-gpu 2 --time 00:10:00 --mpi pmix \
  --dry-run >/dev/null
# No GPU here: CPU slots (2 a node) instead of the GPU; K = 2 stays, so MPS starts.
sed -i -e '/^#SBATCH --gpus-per-node=/d' -e 's/^#SBATCH --cpus-per-task=.*/#SBATCH --cpus-per-task=1/' \
  -e 's/ --device cuda --cells-per-gpu 2)$/ --device cpu --workers 2 --threads 1)/' job/job.sbatch
check "the job script keeps K = 2 and runs CPU slots" grep -q -- '--device cpu --workers 2' job/job.sbatch
export FAKE_LOG=$WORK/mps.log TMPDIR=$NODE_TMP PATH=$WORK/bin:$PATH
t0=$(date +%s.%N)
job=$(sl sbatch --parsable job/job.sbatch)
check "sbatch printed a job id ($job)" grep -qE '^[0-9]+$' <<<"$job"
wait_job "$job" 120
t1=$(date +%s.%N)
sed 's/^/  job: /' job/slurm-"$job".out | grep -v "^  job: *$" | tail -12
check "the job ended COMPLETED ($JOB_STATE)" test "$JOB_STATE" = COMPLETED
check "the job ran on h[1-3]" grep -q "on h\[1-3\]" job/slurm-"$job".out
check "the run exited 0" grep -q "run exited 0" job/slurm-"$job".out
check "MPS started once on each node, in that node's own TMPDIR" $PY - "$FAKE_LOG" "$NODE_TMP" <<'PY'
import collections, sys
lines = open(sys.argv[1]).read().split("\n")
starts = [l for l in lines if l.startswith("start ")]
quits = [l for l in lines if l.startswith("control quit")]
hosts = collections.Counter(l.split("host=")[1].split()[0] for l in starts)
print("MPS starts per node:", dict(hosts), "quits:", len(quits))
assert hosts == {"h1": 1, "h2": 1, "h3": 1}, starts
assert all(f"tmpdir={sys.argv[2]} pipe={sys.argv[2]}/attnsweep-mps-" in l for l in starts), starts
assert sorted(l.split("host=")[1].split()[0] for l in quits) == ["h1", "h2", "h3"], quits
PY
check "each node's MPS folder was removed from its TMPDIR" test -z "$(sl srun -N3 -n3 ls -A "$NODE_TMP")"
check "the nodes' TMPDIRs are node-local (not this machine's folder)" test -z "$(ls -A "$NODE_TMP")"
check "every cell finished once, on all 3 nodes" $PY - job/events.jsonl 18 <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
fin = [e for e in ev if e["event"] == "finished"]
ids = collections.Counter(e["cell_id"] for e in fin)
assert len(ids) == int(sys.argv[2]) and max(ids.values()) == 1, ids
hosts = collections.Counter(e["host"] for e in fin)
print("cells per node:", dict(hosts))
assert set(hosts) == {"h1", "h2", "h3"}, hosts
PY
check "18 valid results" valid_and_once job 18
echo "3-node Slurm job: $(elapsed "$t0" "$t1") s from sbatch to COMPLETED (2 s of it: wait_job's check that the state holds)"
