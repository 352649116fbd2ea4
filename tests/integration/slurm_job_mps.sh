#!/usr/bin/env bash
# The job script's CUDA MPS (slurm/job.sbatch.in) with K > 1 cells per GPU, run by bash
# outside Slurm with stand-ins on PATH: srun (runs its command here), scontrol and
# nvidia-cuda-mps-control (records what it was asked and the signals it ignores). The
# daemon starts with its pipe and log folders under TMPDIR, ignoring USR1 and TERM; it is
# quit and its folder removed when the run fails, when it is stopped by USR1 (Slurm's
# warning) and requeued; a daemon that does not start leaves the run without MPS; K = 1,
# ATTNSWEEP_NO_MPS=1 or no nvidia-cuda-mps-control on PATH leave MPS alone. The real Slurm runs are slurm_submit.sh and srun_lost_rank.sh.
source "$(dirname "$0")/lib.bash"
mkdir bin tmp
LOG=$WORK/mps.log
cat >bin/srun <<'S'
#!/bin/bash
# srun's options, then the command, run here (one task).
while [ $# -gt 0 ] && [ "${1#--}" != "$1" ]; do shift; done
exec "$@"
S
cat >bin/scontrol <<'S'
#!/bin/bash
echo "scontrol $*" >>"$FAKE_LOG"
exit 1  # "requeue failed": the job script then exits at once instead of waiting to be requeued
S
cat >bin/nvidia-cuda-mps-control <<'S'
#!/bin/bash
if [ "${1:-}" = -d ]; then
  [ "${FAKE_MPS_FAIL:-0}" = 1 ] && { echo "start failed" >>"$FAKE_LOG"; exit 1; }
  # Bits 10 (USR1) and 15 (TERM) of the ignored-signal mask: 0x200 and 0x4000.
  ign=$((16#$(awk '/^SigIgn/ {print $2}' /proc/$$/status)))
  echo "start pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY usr1_ignored=$(( (ign >> 9) & 1 )) term_ignored=$(( (ign >> 14) & 1 ))" >>"$FAKE_LOG"
  test -d "$CUDA_MPS_PIPE_DIRECTORY" && test -d "$CUDA_MPS_LOG_DIRECTORY"
else
  echo "control $(cat) pipe=$CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_LOG"
fi
S
chmod +x bin/*
cat >grid.json <<'J'
{"axes": {"task": ["synthetic"], "seed": [0]}, "fixed": {"seconds": 0.05}}
J
export FAKE_LOG=$LOG TMPDIR=$WORK/tmp SLURM_JOB_ID=4242 SLURM_JOB_NODELIST=node1
P=$WORK/bin:$PATH

# 1. K 2: MPS starts, the run ends (without a GPU: exit 2, --device cuda refused), MPS is quit.
"$ATTNSWEEP" submit grid.json --out job --nodes 1 --gpus-per-node 1 --cells-per-gpu 2 --dry-run >/dev/null
run_rc env PATH="$P" bash job/job.sbatch
echo "$OUT" | sed 's/^/  job: /'
check "the job ends with the run (exit $RC), not requeued" test "$RC" != 75
check "it says it starts MPS" grep -q "2 cells per GPU: CUDA MPS on each node" <<<"$OUT"
check "the daemon started once, its folders under TMPDIR" test "$(grep -c "^start pipe=$WORK/tmp/attnsweep-mps-4242\.[^/]*/pipe log=$WORK/tmp/attnsweep-mps-4242\.[^/]*/log" "$LOG")" = 1
check "ignoring USR1 and TERM" grep -q "usr1_ignored=1 term_ignored=1" "$LOG"
check "and was quit after the run, on the same pipe" \
  test "$(grep "^control quit pipe=" "$LOG" | cut -d= -f2)" = "$(grep "^start" "$LOG" | sed 's/.*pipe=\([^ ]*\).*/\1/')"
check "its folder is removed" test -z "$(ls tmp)"

# 2. Stopped by USR1 (Slurm's warning before the time limit): the rank gets it, exits 75,
# MPS is quit, the job asks to be requeued. A stand-in rank waits for the signal.
cat >rank.sh <<S
#!/bin/bash
trap 'echo "rank got USR1" >>"$LOG"; exit 75' USR1
echo "rank started CUDA_MPS_PIPE_DIRECTORY=\$CUDA_MPS_PIPE_DIRECTORY" >>"$LOG"
while :; do sleep 0.1; done
S
chmod +x rank.sh
"$ATTNSWEEP" submit grid.json --out job2 --nodes 1 --gpus-per-node 1 --cells-per-gpu 2 --dry-run >/dev/null
sed -i "s|^run=(.* run |run=($WORK/rank.sh run |" job2/job.sbatch
: >"$LOG"
env PATH="$P" bash job2/job.sbatch >job.out 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "rank started" "$LOG" 2>/dev/null && break; sleep 0.1; done
check "the rank runs with the node's MPS pipe" grep -q "rank started CUDA_MPS_PIPE_DIRECTORY=$WORK/tmp/attnsweep-mps-4242" "$LOG"
kill -USR1 "$job"
set +e
wait "$job"
RC=$?
set -e
sed 's/^/  job: /' job.out
check "the job exits 75 (resumable)" test "$RC" = 75
check "the rank got USR1" grep -q "rank got USR1" "$LOG"
check "MPS was quit after the rank left" bash -c "grep -A9 'rank got USR1' '$LOG' | grep -q '^control quit'"
check "the job asked to be requeued" grep -q "scontrol requeue 4242" "$LOG"
check "the MPS folder is removed" test -z "$(ls tmp)"

# 3. The daemon does not start: the run goes on without MPS, the folder is removed.
: >"$LOG"
run_rc env PATH="$P" FAKE_MPS_FAIL=1 bash job/job.sbatch
check "a daemon that does not start: the log says so" grep -q "CUDA MPS did not start" <<<"$OUT"
check "the run still ran (exit $RC)" grep -q "run exited" <<<"$OUT"
check "nothing to quit, and the folder is removed" bash -c "! grep -q '^control' '$LOG' && test -z \"\$(ls '$WORK/tmp')\""

# 4. No MPS: ATTNSWEEP_NO_MPS=1, K 1, or no nvidia-cuda-mps-control on PATH.
: >"$LOG"
run_rc env PATH="$P" ATTNSWEEP_NO_MPS=1 bash job/job.sbatch
check "ATTNSWEEP_NO_MPS=1: MPS left alone" bash -c "! grep -q '^start\|^control' '$LOG'"
"$ATTNSWEEP" submit grid.json --out job1 --nodes 1 --gpus-per-node 1 --dry-run >/dev/null
sed -i "s|^run=(.* run |run=($WORK/rank.sh run |" job1/job.sbatch
: >"$LOG"
env PATH="$P" bash job1/job.sbatch >/dev/null 2>&1 &
job=$!
for _ in $(seq 100); do grep -q "rank started" "$LOG" 2>/dev/null && break; sleep 0.1; done
kill -USR1 "$job"
wait "$job" || true
check "K 1: the rank ran without MPS" grep -q "rank started CUDA_MPS_PIPE_DIRECTORY=$" "$LOG"
check "K 1: MPS left alone" bash -c "! grep -q '^start\|^control' '$LOG'"
if ! command -v nvidia-cuda-mps-control >/dev/null; then  # else the machine's own would be found
  mv bin/nvidia-cuda-mps-control nvidia-cuda-mps-control.off
  run_rc env PATH="$P" bash job/job.sbatch
  check "no nvidia-cuda-mps-control on PATH: no MPS" bash -c "! grep -q 'CUDA MPS' <<<'$OUT'"
fi
