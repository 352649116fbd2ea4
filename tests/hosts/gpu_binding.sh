#!/usr/bin/env bash
# GPU binding per node: mpirun over 3 hosts, 2 ranks each; each node's two ranks share out
# its GPUs by local rank (coordinator/gpu_binding.h). No GPU here: the device count is
# faked with ATTNSWEEP_FAKE_GPU_COUNT (the ranks plan and name GPU slots as for real ones,
# set CUDA_VISIBLE_DEVICES on their cells, and the cells run on the CPU). Checked from
# each rank's line on stderr and from the environment of the running cells:
#   4 GPUs a node: local rank 0 takes 0,1 and local rank 1 takes 2,3, on every host, one
#     GPU a cell;
#   3 GPUs named by the launcher (CUDA_VISIBLE_DEVICES=5,6,7): 5 and 6,7;
#   1 GPU: both ranks share it (0 and 0).
# shellcheck source=mpi_test.bash
source "$(cd "$(dirname "$0")" && pwd)/mpi_test.bash"
mpi_hosts_up 3
grid_synthetic grid.json 24 0.8
# binding_run NAME EXPECTED MPIRUN-ARGS...: runs the grid; EXPECTED is "local0=GPUS local1=GPUS".
binding_run() {
  local name=$1 expected=$2
  shift 2
  # shellcheck disable=SC2034  # read by start_sweep
  MPIRUN_ARGS=("$@")
  start_sweep "$name"
  : >"$name.cells"
  while kill -0 "$MPIRUN" 2>/dev/null; do  # the running cells' environment
    for p in $(pgrep -f "attnsweep train $name/cells/" || true); do
      { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -E '^(OMPI_COMM_WORLD_RANK|OMPI_COMM_WORLD_LOCAL_RANK|CUDA_VISIBLE_DEVICES)=' |
        sort | tr '\n' ' ' >>"$name.cells" || true
      echo >>"$name.cells"
    done
    sleep 0.2
  done
  wait_sweep 5
  check "$name: the run exits 0 (got $RC)" test "$RC" = 0
  grep "local rank" "$name.stderr" | sort | sed 's/^/  /'
  check "$name: each node's ranks took $expected, one GPU a cell" $PY - "$name.stderr" "$name.cells" "$expected" <<'PY'
import collections, re, sys
want = dict(kv.split("=") for kv in sys.argv[3].split())
lines = [l for l in open(sys.argv[1]) if " local rank " in l]
got = collections.defaultdict(dict)
for l in lines:
    m = re.match(r"attnsweep: (\S+) local rank (\d) of 2 takes GPUs? (\S+) of \d+", l)
    assert m, l
    got[m[1]]["local" + m[2]] = m[3]
assert sorted(got) == ["h1", "h2", "h3"], dict(got)
for h, g in got.items():
    assert g == want, (h, g, want)
seen = collections.Counter()
for l in open(sys.argv[2]):
    env = dict(kv.split("=", 1) for kv in l.split())
    if "CUDA_VISIBLE_DEVICES" not in env:
        continue  # a process sampled as it started
    mine = want["local" + env["OMPI_COMM_WORLD_LOCAL_RANK"]].split(",")
    assert env["CUDA_VISIBLE_DEVICES"] in mine, (env, mine)
    seen[(env["OMPI_COMM_WORLD_RANK"], env["CUDA_VISIBLE_DEVICES"])] += 1
print("cells seen running on (rank, GPU):", sorted(seen))
assert len({r for r, _ in seen}) >= 4, seen  # most ranks seen with a running cell
PY
}
binding_run four "local0=0,1 local1=2,3" -x ATTNSWEEP_FAKE_GPU_COUNT=4
binding_run named "local0=5 local1=6,7" -x ATTNSWEEP_FAKE_GPU_COUNT=3 -x CUDA_VISIBLE_DEVICES=5,6,7
binding_run one "local0=0 local1=0" -x ATTNSWEEP_FAKE_GPU_COUNT=1
