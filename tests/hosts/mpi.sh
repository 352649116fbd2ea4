#!/usr/bin/env bash
# mpirun over 3 hosts (network namespaces, tests/hosts/hosts.bash), 2 ranks each, the
# TCP BTL only (--mca btl tcp,self, restricted to the hosts' subnet), orted started on
# h2 and h3 through a plm_rsh_agent that enters their namespace. A small grid completes
# with cells finished on every host (events.jsonl says which), and its result files are
# identical to a one-process run of the same grid; a rerun starts nothing.
# shellcheck source=mpi_test.bash
source "$(cd "$(dirname "$0")" && pwd)/mpi_test.bash"
mpi_hosts_up 3
grid_mixed grid.json

t0=$(date +%s.%N)
run_rc mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out multi --workers 1 --threads 1
t1=$(date +%s.%N)
echo "$ERR" | grep attnsweep | tail -3
check "mpirun over 3 hosts exits 0 (got $RC)" test "$RC" = 0
check "every cell finished once, on all 3 hosts, 6 ranks" $PY - multi/events.jsonl "$(grid_cells grid.json)" <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
fin = [e for e in ev if e["event"] == "finished"]
ids = collections.Counter(e["cell_id"] for e in fin)
assert len(ids) == int(sys.argv[2]) and max(ids.values()) == 1, (len(ids), ids.most_common(1))
hosts = collections.Counter(e["host"] for e in fin)
ranks = collections.Counter((e["host"], e["rank"]) for e in fin)
print("cells per host:", dict(hosts), " per (host, rank):", dict(sorted(ranks.items())))
assert set(hosts) == {"h1", "h2", "h3"}, hosts
start = [e for e in ev if e["event"] == "sweep_started"][0]
assert start["host"] == "h1", start
PY
check "result files record the host that ran them" $PY - multi/runs <<'PY'
import collections, glob, sys, h5py
hosts = collections.Counter(h5py.File(f)["/"].attrs["host"] for f in glob.glob(sys.argv[1] + "/*.h5"))
print("result files per host:", dict(hosts))
assert set(hosts) == {"h1", "h2", "h3"}, hosts
PY
"$ATTNSWEEP" run grid.json --out single --workers 2 --threads 1 >/dev/null 2>&1
check "the results are identical to a one-host run (scripts/compare_results.py)" \
  $PY "$SRC/scripts/compare_results.py" multi single
run_rc mpirun_hosts -np 6 "$ATTNSWEEP" run grid.json --out multi --workers 1 --threads 1
check "the rerun over 3 hosts exits 0 and starts no cell" test "$RC" = 0 -a "$(count_events multi started)" = 0
echo "mpirun over 3 hosts: $(elapsed "$t0" "$t1") s for $(grid_cells grid.json) cells"
