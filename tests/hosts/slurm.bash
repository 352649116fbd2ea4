# A Slurm cluster over the hosts of hosts.bash (sourced after it): slurmctld on h1 and
# one slurmd a host (`slurmd -N hN`, spool, pid and log files with %n), as Slurm's own
# multi-node test clusters do; a munged of the test's own on the machine (its socket is a
# file every host sees). Each slurmd has a node-local TMPDIR: an empty tmpfs at $NODE_TMP
# that only that node's processes see (a mount namespace of its own).
#   slurm_up             the cluster; clients run on h1 with `sl CMD...`
#   slurmd_start HOST    (re)starts that host's slurmd
#   wait_job ID [TIMEOUT_S]   until the job is in a final state: JOB_STATE
# hosts_down (the EXIT trap) ends every daemon with its host, and the test's munged.
SLURM_DIR=$WORK/slurm
NODE_TMP=$WORK/node-tmp
export SLURM_CONF=$SLURM_DIR/slurm.conf
sl() { on h1 "$@"; }
# A munged of the test's own (its socket, pid, seed and log in MUNGE_DIR), so that no other
# test's munge is shared or stopped: slurm.conf points Slurm at it (AuthInfo=socket=).
MUNGE_DIR=/run/attnsweep-munge-$HOSTS_TAG
start_munge() {
  mkdir -p /etc/munge "$MUNGE_DIR"
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge: /etc/munge /etc/munge/munge.key "$MUNGE_DIR" && chmod 400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --force --socket="$MUNGE_DIR/socket" --pid-file="$MUNGE_DIR/munged.pid" \
    --seed-file="$MUNGE_DIR/seed" --log-file="$MUNGE_DIR/munged.log"
  local _
  for _ in $(seq 50); do munge -S "$MUNGE_DIR/socket" -n 2>/dev/null | unmunge -S "$MUNGE_DIR/socket" >/dev/null 2>&1 && break; sleep 0.1; done
  munge -S "$MUNGE_DIR/socket" -n | unmunge -S "$MUNGE_DIR/socket" | grep -q 'STATUS: *Success' ||
    fail "munge does not work ($MUNGE_DIR/munged.log: $(tail -3 "$MUNGE_DIR/munged.log" 2>/dev/null))"
}
hosts_before_down() {  # called by hosts_down
  local pid
  pid=$(cat "$MUNGE_DIR/munged.pid" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$MUNGE_DIR"
}
slurm_up() {
  local b h i mem
  for b in slurmctld slurmd sbatch munged; do
    command -v $b >/dev/null || { echo "SKIPPED: $b not installed (slurmctld slurmd slurm-client munge)"; exit 77; }
  done
  start_munge
  mkdir -p "$SLURM_DIR"/{state,spool,log} "$NODE_TMP"
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 4))
  cat >"$SLURM_CONF" <<CONF
ClusterName=attnsweephosts
SlurmctldHost=h1($HOSTS_NET.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_DIR/socket
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
ReturnToService=2
SlurmctldPort=16827
SlurmdPort=16828
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool/%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SlurmdTimeout=${SLURMD_TIMEOUT:-300}
MessageTimeout=5
MinJobAge=600
KillWait=5
InactiveLimit=0
JobRequeue=1
TmpFS=$NODE_TMP
NodeName=DEFAULT CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
CONF
  for i in $(seq ${#HOSTS[@]}); do echo "NodeName=h$i NodeAddr=$HOSTS_NET.$i" >>"$SLURM_CONF"; done
  echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES" >>"$SLURM_CONF"
  # PMIx's folders (the server's under TmpFS, the clients' here) must be node-local:
  # in the shared /tmp, the nodes of one step collide on one name.
  echo "PMIxCliTmpDirBase=$NODE_TMP" >"$SLURM_DIR/mpi.conf"
  for h in "${HOSTS[@]}"; do mkdir -p "$SLURM_DIR/spool/$h"; done
  sl slurmctld -c -f "$SLURM_CONF"
  for h in "${HOSTS[@]}"; do slurmd_start "$h"; done
  local _
  for _ in $(seq 150); do
    [ "$(sl sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle')" = "${#HOSTS[@]}" ] && return 0
    sleep 0.2
  done
  sl sinfo -N || true
  tail -20 "$SLURM_DIR"/log/*.log
  fail "the test cluster did not come up"
}
slurmd_start() { on_private "$1" "$NODE_TMP" slurmd -N "$1" -f "$SLURM_CONF"; }
# wait_job ID [TIMEOUT_S]: until a final state has held for 2 s (a job being requeued
# passes through them); a requeued job held back by Slurm (BeginTime, about 2 minutes)
# is let go 3 s after the requeue, as tests/integration/slurm_cluster.bash does.
wait_job() {
  local id=$1 t=${2:-120} st reason stable=0 held=0 _
  for _ in $(seq $((t * 5))); do
    st=$(sl scontrol show job "$id" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2) || true
    reason=$(sl scontrol show job "$id" 2>/dev/null | grep -oE 'Reason=[A-Za-z_]+' | cut -d= -f2) || true
    case "$st" in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | DEADLINE | BOOT_FAIL)
        stable=$((stable + 1))
        if [ "$stable" -ge 10 ]; then
          # shellcheck disable=SC2034  # for the caller
          JOB_STATE=$st
          return 0
        fi
        ;;
      *) stable=0 ;;
    esac
    if [ "$st" = PENDING ] && [ "$reason" = BeginTime ]; then
      held=$((held + 1))
      if [ "$held" -ge 15 ]; then sl scontrol update JobId="$id" StartTime=now >/dev/null 2>&1 || true; fi
    else
      held=0
    fi
    sleep 0.2
  done
  sl squeue || true
  sl scontrol show job "$id" || true
  fail "job $id not finished after $t s"
}
