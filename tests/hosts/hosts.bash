# Several hosts on one machine, for the multi-host tests (sourced after
# tests/integration/lib.bash; root). Each host is a network namespace with its own
# loopback, an address on a private subnet and a hostname of its own (a UTS namespace,
# made as each process enters the host); /etc/hosts inside the hosts names them all
# (`ip netns exec` binds /etc/netns/NS/hosts over /etc/hosts). The hosts are joined by
# veth pairs to a bridge that lives in a namespace of its own (the "switch"), so nothing
# of the test appears in the machine's own network namespace, and every test may use
# the same subnet.
#
#   hosts_up N            creates hosts h1..hN (10.77.0.1..N/24) and the switch
#   on HOST CMD...        runs CMD on that host (its network, its hostname, its /etc/hosts)
#   on_private HOST PATH CMD...   the same, with an empty tmpfs over PATH that only
#                         this command and what it starts see (a run directory that is
#                         not shared)
#   host_kill HOST        SIGKILL of every process on the host (a node that dies)
#   host_cut HOST / host_mend HOST   its link down / up: processes alive, no traffic
#   host_drop HOST / host_undrop HOST   its link up, every packet either way silently
#                         dropped (a queue of length 0 on both ends) / passed again
#   host_freeze HOST / host_thaw HOST   SIGSTOP / SIGCONT of every process on the host
#   mpi_agent FILE        writes a plm_rsh_agent for mpirun: starts orted on a host
#   hosts_down            kills what runs on the hosts and removes every namespace,
#                         veth, bridge and /etc/netns entry (the EXIT trap calls it and
#                         then fails the test if anything of it is left)
# A machine where namespaces cannot be made: the test prints SKIPPED and exits 77.
HOSTS_TAG=asw$$
HOSTS_NET=10.77.0
HOSTS_SUBNET=$HOSTS_NET.0/24
HOSTS=()
# shellcheck disable=SC2034  # extra mpirun arguments of start_sweep (grids.bash)
MPIRUN_ARGS=()
export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$HOSTS_SUBNET OMPI_MCA_oob_tcp_if_include=$HOSTS_SUBNET
# Open MPI's session directories (/tmp/ompi.HOST.UID/jf.N: PMIx's shared-memory store)
# in this test's own folder: every test's hosts are named h1, h2 ..., and a Slurm job of
# every test is job 1, so a stale one left by an earlier test's killed job was found
# again by a requeued step, which then crashed in MPI_Init (SIGSEGV at address 0).
export OMPI_MCA_orte_tmpdir_base=$WORK/ompi-session
mkdir -p "$OMPI_MCA_orte_tmpdir_base"

ns_of() { echo "$HOSTS_TAG-$1"; }
hosts_up() {
  local n=$1 i h ns sw
  command -v ip >/dev/null || { echo "SKIPPED: ip not found (iproute2)"; exit 77; }
  command -v unshare >/dev/null || { echo "SKIPPED: unshare not found (util-linux)"; exit 77; }
  sw=$(ns_of sw)
  if ! ip netns add "$sw" 2>/dev/null; then
    echo "SKIPPED: cannot create a network namespace (ip netns add: needs root and CAP_SYS_ADMIN)"
    exit 77
  fi
  trap hosts_exit EXIT
  ip -n "$sw" link set lo up
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for i in $(seq "$n"); do HOSTS+=("h$i"); done
  for i in $(seq "$n"); do
    h=h$i ns=$(ns_of "$h")
    ip netns add "$ns"
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      for j in $(seq "$n"); do echo "$HOSTS_NET.$j h$j"; done
    } >"/etc/netns/$ns/hosts"
    ip -n "$ns" link set lo up
    ip -n "$sw" link add "$h" type veth peer name eth0 netns "$ns"
    ip -n "$sw" link set "$h" master br0 up
    ip -n "$ns" addr add "$HOSTS_NET.$i/24" dev eth0
    ip -n "$ns" link set eth0 up
  done
  for i in $(seq 2 "$n"); do
    on h1 ping -c1 -W2 "h$i" >/dev/null 2>&1 || ping_retry "h$i" || fail "h1 cannot reach h$i"
  done
  echo "hosts up: ${HOSTS[*]} on $HOSTS_SUBNET (namespaces $HOSTS_TAG-*)"
}
ping_retry() {
  local _
  for _ in $(seq 20); do on h1 ping -c1 -W1 "$1" >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
# on HOST CMD...: its network namespace (and its /etc/hosts), a UTS namespace named HOST.
on() {
  local h=$1
  shift
  ip netns exec "$(ns_of "$h")" unshare --uts /bin/sh -c 'hostname "$0"; exec "$@"' "$h" "$@"
}
# on_private HOST PATH CMD...: as `on`, with an empty tmpfs over PATH in a mount namespace
# of the command's own (nothing propagates back). It enters the host's network with
# nsenter, not `ip netns exec`, and binds the host's /etc/hosts itself: `ip netns exec`
# also mounts a fresh /sys, which hides /sys/fs/cgroup, and slurmd needs it.
on_private() {
  local h=$1 p=$2 ns
  shift 2
  ns=$(ns_of "$h")
  nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private /bin/sh -c \
    'hostname "$0" && mount --bind "/etc/netns/$1/hosts" /etc/hosts && mount -t tmpfs -o size=16m attnsweep-private "$2" &&
     shift 2 && exec "$@"' "$h" "$ns" "$p" "$@"
}
host_pids() { ip netns pids "$(ns_of "$1")" 2>/dev/null || true; }
host_kill() {
  local pids _
  for _ in $(seq 50); do  # a process may fork while we kill: until none is left
    pids=$(host_pids "$1")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -9 $pids 2>/dev/null || true
    sleep 0.1
  done
  fail "processes left on $1 after SIGKILL: $(host_pids "$1")"
}
host_cut() { ip -n "$(ns_of sw)" link set "$1" down; }
host_mend() { ip -n "$(ns_of sw)" link set "$1" up; }
# A pfifo of limit 0 drops what it is given and tells no one: TCP retransmits into it, no
# connection is reset, the link stays up.
host_drop() {
  ip netns exec "$(ns_of sw)" tc qdisc add dev "$1" root pfifo limit 0
  ip netns exec "$(ns_of "$1")" tc qdisc add dev eth0 root pfifo limit 0
}
host_undrop() {
  ip netns exec "$(ns_of sw)" tc qdisc del dev "$1" root
  ip netns exec "$(ns_of "$1")" tc qdisc del dev eth0 root
}
# Every process of the host stopped, those it forks meanwhile too (until none runs).
host_freeze() {
  local pids _ p running
  for _ in $(seq 50); do
    pids=$(host_pids "$1")
    # shellcheck disable=SC2086
    [ -n "$pids" ] && kill -STOP $pids 2>/dev/null
    running=
    for p in $pids; do
      [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" = T ] || [ ! -e "/proc/$p" ] || running=1
    done
    [ -z "$running" ] && [ "$(host_pids "$1")" = "$pids" ] && return 0
    sleep 0.05
  done
  fail "processes still running on $1 after SIGSTOP"
}
host_thaw() {
  # shellcheck disable=SC2046
  kill -CONT $(host_pids "$1") 2>/dev/null || true
}
# mpi_agent FILE: Open MPI's rsh launcher runs `FILE HOST COMMAND...` for each remote
# host; the agent runs the command (orted) on that host.
mpi_agent() {
  cat >"$1" <<AGENT
#!/bin/bash
# plm_rsh_agent of the multi-host tests: "ssh" into a namespace host.
set -euo pipefail
host=\$1
shift
priv=${HOSTS_PRIVATE_DIR:-}
if [ -n "\$priv" ] && [ "\$host" = "${HOSTS_PRIVATE_HOST:-}" ]; then
  exec ip netns exec "$HOSTS_TAG-\$host" unshare --uts --mount --propagation private /bin/sh -c \
    'hostname "\$0"; mount -t tmpfs -o size=16m attnsweep-private "\$1" && shift && exec /bin/sh -c "\$*"' "\$host" "\$priv" "\$@"
fi
exec ip netns exec "$HOSTS_TAG-\$host" unshare --uts /bin/sh -c 'hostname "\$0"; shift; exec /bin/sh -c "\$*"' "\$host" - "\$@"
AGENT
  chmod +x "$1"
}
# mpirun_hosts ARGS...: mpirun on h1 over every host, 2 slots each, TCP only, orted
# started on the others through the agent.
mpirun_hosts() {
  local hf=$WORK/hostfile h
  : >"$hf"
  for h in "${HOSTS[@]}"; do echo "$h slots=2" >>"$hf"; done
  [ -x "$WORK/agent" ] || mpi_agent "$WORK/agent"
  on h1 mpirun --hostfile "$hf" --mca plm_rsh_agent "$WORK/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self --mca btl_tcp_if_include "$HOSTS_SUBNET" --mca oob_tcp_if_include "$HOSTS_SUBNET" \
    -x OMPI_MCA_btl -x OMPI_MCA_btl_tcp_if_include -x OMPI_MCA_oob_tcp_if_include -x OMPI_MCA_orte_tmpdir_base "$@"
}
hosts_down() {
  set +e
  local h ns _
  [ "$(type -t hosts_before_down)" = function ] && hosts_before_down
  for h in "${HOSTS[@]}" sw; do
    ns=$(ns_of "$h")
    ip netns list 2>/dev/null | grep -q "^$ns\b" || continue
    for _ in $(seq 30); do
      pids=$(host_pids "$h")
      [ -z "$pids" ] && break
      # shellcheck disable=SC2086
      kill -9 $pids 2>/dev/null
      sleep 0.1
    done
    ip netns del "$ns"
    rm -rf "/etc/netns/$ns"
  done
  set -e
}
# hosts_left: what of this test is still there (empty when the teardown was complete).
hosts_left() {
  {
    ip netns list 2>/dev/null | grep "^$HOSTS_TAG-" | sed 's/^/namespace /'
    ls -d /etc/netns/"$HOSTS_TAG"-* 2>/dev/null | sed 's/^/file /'
    grep -E "$HOSTS_TAG|attnsweep-private" /proc/self/mounts | sed 's/^/mount /'
    ip -o link show 2>/dev/null | grep -E "$HOSTS_TAG" | sed "s/^/link /"
    ls -d /run/attnsweep-*-"$HOSTS_TAG" 2>/dev/null | sed 's/^/folder /'
    [ -z "${MUNGE_DIR:-}" ] || pgrep -f "munged .*$MUNGE_DIR" | sed 's/^/munged /'
  } || true
}
hosts_exit() {
  local rc=$? left
  hosts_down
  left=$(hosts_left)
  if [ -n "${KEEP_HOSTS_WORK:-}" ]; then cp -r "$WORK" "$KEEP_HOSTS_WORK" 2>/dev/null; fi
  rm -rf "$WORK"
  if [ -n "$left" ]; then
    echo "FAIL: the teardown left: $left" >&2
    exit 1
  fi
  echo "teardown: no namespace, veth, bridge, process or mount of the test left"
  exit "$rc"
}
