# A real one-node Slurm (munge + slurmctld + slurmd, CPUs only) for the tests, as
# docs/slurm.md ("Tested here") describes: scratch state, non-default ports, no systemd,
# no cgroups. Sourced after lib.bash. start_cluster / stop_cluster; stop runs on EXIT.
SLURM_SCRATCH=$WORK/slurm
start_cluster() {
  for b in slurmctld slurmd sbatch munged; do
    command -v $b >/dev/null || { echo "SKIPPED: $b not installed (slurmctld slurmd slurm-client munge)"; exit 77; }
  done
  mkdir -p "$SLURM_SCRATCH"/{state,spool,log} /var/lib/munge /var/log/munge /run/munge /etc/munge
  chown munge: /var/lib/munge /var/log/munge /run/munge /etc/munge
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    if [ ! -s /etc/munge/munge.key ]; then
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge: /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged --force
    for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
    munge -n | unmunge | grep -q 'STATUS: *Success' || fail "munge does not work"
    STARTED_MUNGE=1
  fi
  local host mem
  host=$(hostname -s)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
  export SLURM_CONF=$SLURM_SCRATCH/slurm.conf
  cat > "$SLURM_CONF" <<CONF
ClusterName=attnsweeptest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmctldPort=16817
SlurmdPort=16818
StateSaveLocation=$SLURM_SCRATCH/state
SlurmdSpoolDir=$SLURM_SCRATCH/spool
SlurmctldPidFile=$SLURM_SCRATCH/slurmctld.pid
SlurmdPidFile=$SLURM_SCRATCH/slurmd.pid
SlurmctldLogFile=$SLURM_SCRATCH/log/slurmctld.log
SlurmdLogFile=$SLURM_SCRATCH/log/slurmd.log
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
MinJobAge=600
KillWait=5
InactiveLimit=0
JobRequeue=1
NodeName=$host CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  slurmctld -c -f "$SLURM_CONF"
  slurmd -f "$SLURM_CONF"
  trap stop_cluster EXIT
  for _ in $(seq 100); do sinfo -h -o %t 2>/dev/null | grep -qE '^idle' && return 0; sleep 0.2; done
  sinfo; tail -20 "$SLURM_SCRATCH"/log/*.log
  fail "the test cluster did not come up"
}
stop_cluster() {
  set +e
  scancel --quiet --full --signal=KILL $(squeue -h -o %i 2>/dev/null) 2>/dev/null
  for p in slurmd slurmctld; do
    [ -f "$SLURM_SCRATCH/$p.pid" ] && kill "$(cat "$SLURM_SCRATCH/$p.pid")" 2>/dev/null
  done
  sleep 0.5
  for p in slurmd slurmctld; do
    [ -f "$SLURM_SCRATCH/$p.pid" ] && kill -9 "$(cat "$SLURM_SCRATCH/$p.pid")" 2>/dev/null
  done
  [ "${STARTED_MUNGE:-0}" = 1 ] && pkill -x munged
  if [ -n "${KEEP_SLURM_LOGS:-}" ]; then cp -r "$WORK" "$KEEP_SLURM_LOGS" 2>/dev/null; fi
  rm -rf "$WORK"
}
# wait_job ID TIMEOUT_S: until the job is in a final state (a requeued job is not: it
# passes through REQUEUED and PENDING, and squeue may briefly not list it).
wait_job() {
  local id=$1 t=${2:-120} st reason stable=0 held=0
  for _ in $(seq $((t * 5))); do
    st=$(scontrol show job "$id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2) || true
    reason=$(scontrol show job "$id" 2>/dev/null | grep -oE 'Reason=[A-Za-z_]+' | cut -d= -f2) || true
    # A job being requeued can show FAILED for a moment before it turns PENDING: a final
    # state counts once it has held for 2 s.
    case "$st" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|DEADLINE|BOOT_FAIL)
        stable=$((stable + 1))
        if [ "$stable" -ge 10 ]; then JOB_STATE=$st; return 0; fi ;;
      *) stable=0 ;;
    esac
    # Slurm holds a requeued job back (BeginTime, about 2 minutes); as the cluster's
    # admin the test lets it start sooner, but not within the second of the requeue:
    # slurmd revoked the old run's credential then, and a start in that same second
    # fails ("Job credential revoked") and ends the job FAILED.
    if [ "$st" = PENDING ] && [ "$reason" = BeginTime ]; then
      held=$((held + 1))
      [ "$held" -ge 15 ] && scontrol update JobId="$id" StartTime=now >/dev/null 2>&1 || true
    else
      held=0
    fi
    sleep 0.2
  done
  squeue; scontrol show job "$id"; fail "job $id not finished after $t s"
}
# wait_requeue ID: until Slurm has counted a requeue of the job (up to 120 s). Until then a
# job being requeued can show FAILED for a few seconds on a loaded machine (its batch
# script is killed with the old run's 75). The caller checks the count.
wait_requeue() {
  for _ in $(seq 600); do
    scontrol show job "$1" 2>/dev/null | grep -qE 'Restarts=[1-9]' && return 0
    sleep 0.2
  done
  return 0
}
# wait_restart ID OUTFILE: until the requeued job has started again ("(restart 1)" in its
# output; up to 180 s). Its BeginTime hold is released 3 s after the requeue, not at once
# (see wait_job). The caller checks that it started.
wait_restart() {
  sleep 3
  for _ in $(seq 900); do
    grep -q "(restart 1)" "$2" 2>/dev/null && return 0
    if scontrol show job "$1" 2>/dev/null | grep -q 'Reason=BeginTime'; then
      scontrol update JobId="$1" StartTime=now >/dev/null 2>&1 || true
    fi
    sleep 0.2
  done
  return 0
}
