# The job script's own verdict on srun's exit (slurm/job.sbatch.in), without a cluster:
# srun and scontrol are stubs on PATH. srun exits 0 although its step never launched (seen
# under Slurm right after a requeue: "launch failed" on every task, exit 0): the job must
# not end COMPLETED on that, but launch the step again (a new step id), up to 3 launches,
# then requeue (75), and give up (1) after 3 requeues; a step that runs on its second
# launch finishes the job; a run that did run to its end exits 0 and is not requeued. STUB_TRUST_SRUN=1 in the environment
# replays the old verdict (srun's 0 taken as done) to see the test fail.
source "$(dirname "$0")/lib.bash"
cat > grid.json <<'JSON'
{"name": "job-verdict", "axes": {"task": ["synthetic"], "seed": [0, 1]}, "fixed": {"seconds": 0.1}}
JSON
run_rc "$ATTNSWEEP" submit grid.json --out d --nodes 1 --gpus-per-node 0 --cpus-per-node 2 --dry-run
check "submit --dry-run exits 0 ($ERR)" test "$RC" = 0
if [ "${STUB_TRUST_SRUN:-0}" = 1 ]; then
  sed -i 's/if \[ "\$rc" -eq 0 \] && ! {/if false \&\& ! {/' d/job.sbatch
fi
mkdir stub
# srun: STUB_SRUN=nolaunch prints Slurm's launch failure and exits 0; =run runs the command
# after srun's options here, as one task would; =nolaunch_once fails its first launch and
# runs the next. Each launch is counted in $WORK/launches.
cat > stub/srun <<SH
#!/bin/bash
echo launch >> $WORK/launches
SH
cat >> stub/srun <<'SH'
if [ "$STUB_SRUN" = nolaunch_once ] && [ ! -e "$STUB_ONCE" ]; then
  touch "$STUB_ONCE"
  STUB_SRUN=nolaunch
fi
if [ "$STUB_SRUN" = nolaunch ]; then
  echo "srun: error: task 0 launch failed: Unspecified error" >&2
  exit 0
fi
while [[ "$1" == --* ]]; do shift; done
exec "$@"
SH
# scontrol: records its arguments and refuses, so that the script exits at once instead of
# sleeping until Slurm ends it.
cat > stub/scontrol <<SH
#!/bin/bash
echo "\$*" >> $WORK/scontrol.log
exit 1
SH
chmod +x stub/srun stub/scontrol
job() {  # job RESTART_COUNT SRUN_MODE: runs d/job.sbatch as Slurm would start it
  : > scontrol.log
  : > launches
  run_rc env PATH="$WORK/stub:$PATH" STUB_SRUN="$2" STUB_ONCE="$WORK/once.$1.$2" SLURM_JOB_ID=7 \
    SLURM_RESTART_COUNT="$1" SLURM_JOB_NODELIST=vm ATTNSWEEP_JOB_RELAUNCH_WAIT_S=0 bash d/job.sbatch
}

job 0 nolaunch
check "a step that never ran is requeued (exit $RC)" test "$RC" = 75
check "it says why" grep -q "the run did not finish .*: the step did not run, 3 launches" .stdout
check "after launching the step 3 times ($(wc -l < launches))" test "$(wc -l < launches)" = 3
check "saying so each time" test "$(grep -c "its step did not run .*: launching it again" .stdout)" = 2
check "it asked Slurm to requeue the job" grep -qx "requeue 7" scontrol.log
job 3 nolaunch
check "after 3 requeues it gives up (exit $RC)" test "$RC" = 1
check "and says so" grep -q "after 3 requeues: giving up" .stdout
check "without a requeue" bash -c '! grep -q "^requeue" scontrol.log'
check "a requeued attempt first waits for the last one's step to be gone" grep -qx "listpids 7" scontrol.log
job 0 nolaunch_once
check "a step that runs on its second launch finishes the job (exit $RC: $(tail -2 .stdout))" test "$RC" = 0
check "launched twice, not requeued" test "$(wc -l < launches)" = 2 -a ! -s scontrol.log
rm -f d/runs/*.h5
job 0 run
check "a run that finished exits 0 (got $RC: $(tail -2 .stdout))" test "$RC" = 0
check "and is not requeued" test ! -s scontrol.log
check "its 2 cells are done" test "$(ls d/runs/*.h5 | wc -l)" = 2
job 1 run
check "a requeued check of a finished run exits 0 too (got $RC)" test "$RC" = 0
