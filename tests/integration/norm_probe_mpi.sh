# The demo grid under mpirun -np 3 (rank 0 coordinates, every rank hosts slots):
# every cell completes once, on more than one rank, with the same numbers as a
# one-process run of the same cells.
source "$(dirname "$0")/lib.bash"
command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
GRID=$SRC/experiments/grids/norm_probe.json
run_rc mpirun -np 3 "$ATTNSWEEP" run "$GRID" --out out --workers 1
echo "$ERR" | tail -3
check "mpirun run exits 0 (got $RC)" test "$RC" = 0
check "273 result files" test "$(ls out/runs/*.h5 | wc -l)" = 273
check "events show 3 ranks, each cell finished once" $PY - out/events.jsonl <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
fin = [e for e in ev if e["event"] == "finished"]
ids = collections.Counter(e["cell_id"] for e in fin)
assert len(ids) == 273 and max(ids.values()) == 1, (len(ids), max(ids.values()))
ranks = collections.Counter(e["rank"] for e in fin)
print("cells per rank:", dict(ranks))
assert set(ranks) == {0, 1, 2}, ranks
PY
# The same cell run alone gives the same numbers (one cell per rank does not change them).
runs=(out/runs/*.h5); id=$(basename "${runs[0]}" .h5)  # no `ls | head`: SIGPIPE under pipefail
"$ATTNSWEEP" train out/cells/$id.json --out alone.h5 >/dev/null
check "a cell from the MPI run equals the same cell run alone" $PY - out/runs/$id.h5 alone.h5 <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
assert np.array_equal(a["probe/attn_fro"][()], b["probe/attn_fro"][()])
assert np.array_equal(a["probe/jac_fro"][()], b["probe/jac_fro"][()])
PY
# Resume under MPI recomputes nothing.
run_rc mpirun -np 3 "$ATTNSWEEP" run "$GRID" --out out --workers 1
check "second mpirun run exits 0" test "$RC" = 0
check "second mpirun run starts no cell" test "$(count_events out started)" = 0
