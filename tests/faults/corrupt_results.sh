# Corrupt and truncated result files are detected: `run` moves them aside and
# recomputes exactly those cells, `aggregate` skips and lists them.
source "$(dirname "$0")/../integration/lib.bash"
cat > grid.json <<'JSON'
{"name": "corrupt", "axes": {"task": ["norm_probe"], "activation": ["softmax", "poly"], "degree": [3],
 "prompt_length": [16, 32, 64], "seed": [0]}}
JSON
"$ATTNSWEEP" run grid.json --out out --workers 2 2>/dev/null
files=(out/runs/*.h5)
check "6 cells" test ${#files[@]} = 6
truncate -s 700 "${files[0]}"
head -c 4096 /dev/urandom > "${files[1]}"
cp "${files[2]}" out/runs/not-a-cell.h5
run_rc "$ATTNSWEEP" aggregate out
check "aggregate lists the truncated file" grep -q "$(basename "${files[0]}")" <<<"$ERR"
check "aggregate lists the garbage file" grep -q "$(basename "${files[1]}")" <<<"$ERR"
check "aggregate lists the misnamed file" grep -q "not-a-cell.h5" <<<"$ERR"
check "and aggregates the other 4" grep -q "aggregated 4 cells" <<<"$OUT"
rm out/runs/not-a-cell.h5
run_rc "$ATTNSWEEP" run grid.json --out out --workers 2
check "rerun exits 0" test "$RC" = 0
check "the two bad files were moved aside" test "$(ls out/runs/*.h5.invalid | wc -l)" = 2
check "exactly two cells were recomputed" test "$(count_events out started)" = 2
check "6 valid results again" test "$(ls out/runs/*.h5 | wc -l)" = 6
