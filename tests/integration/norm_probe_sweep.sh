# The demo grid with --workers 2: every cell completes, the norm laws hold, and resume
# recomputes nothing / exactly what was deleted.
source "$(dirname "$0")/lib.bash"
GRID=$SRC/experiments/grids/norm_probe.json
N=$("$ATTNSWEEP" plan "$GRID" --json | $PY -c 'import json,sys; print(len(json.load(sys.stdin)["cells"]))')
check "grid expands to 273 cells" test "$N" = 273

run_rc "$ATTNSWEEP" run "$GRID" --out out --workers 2
check "run exits 0 (got $RC: $ERR)" test "$RC" = 0
check "273 result files" test "$(ls out/runs/*.h5 | wc -l)" = 273
check "no temporary files left" test -z "$(ls out/runs | grep -v '\.h5$' || true)"

"$ATTNSWEEP" aggregate out --fit-min-n 64 > fits.txt
cat fits.txt
$PY "$SRC/tests/integration/check_norm_laws.py" out/aggregate.h5

# A second run recomputes nothing.
run_rc "$ATTNSWEEP" run "$GRID" --out out --workers 2
check "second run exits 0" test "$RC" = 0
check "second run starts no cell" test "$(count_events out started)" = 0

# Deleting two result files recomputes exactly those two.
victims=$(ls out/runs/*.h5 | sed -n '5p;100p')
rm $victims
run_rc "$ATTNSWEEP" run "$GRID" --out out --workers 2
check "third run exits 0" test "$RC" = 0
check "third run starts exactly two cells" test "$(count_events out started)" = 2
for v in $victims; do
  id=$(basename "$v" .h5)
  check "recomputed $id" $PY - out/events.jsonl "$id" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = max(i for i, e in enumerate(lines) if e["event"] == "sweep_started")
assert any(e["event"] == "finished" and e["cell_id"] == sys.argv[2] for e in lines[last:])
PY
done
check "273 result files again" test "$(ls out/runs/*.h5 | wc -l)" = 273
