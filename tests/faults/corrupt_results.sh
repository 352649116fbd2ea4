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
# A file that crashes libhdf5 1.10 (SEGV, found by tests/fuzz) and one with a flipped
# byte in its middle: both rejected by the checksum before libhdf5 parses them.
cp "$SRC/tests/fuzz/known/hdf5_segv_H5A__close.h5" "${files[3]}"
$PY -c "import sys; f = open(sys.argv[1], 'r+b'); n = f.seek(0, 2); f.seek(n // 2); b = f.read(1); f.seek(n // 2); f.write(bytes([b[0] ^ 1]))" "${files[4]}"
run_rc "$ATTNSWEEP" aggregate out
check "aggregate lists the truncated file" grep -q "$(basename "${files[0]}")" <<<"$ERR"
check "aggregate lists the garbage file" grep -q "$(basename "${files[1]}")" <<<"$ERR"
check "aggregate lists the misnamed file" grep -q "not-a-cell.h5" <<<"$ERR"
check "aggregate lists the file that crashes libhdf5" grep -q "$(basename "${files[3]}"): not an attnsweep result file" <<<"$ERR"
check "aggregate lists the file with a flipped byte" grep -q "$(basename "${files[4]}"): checksum mismatch" <<<"$ERR"
check "and aggregates the other 2" grep -q "aggregated 2 cells" <<<"$OUT"
rm out/runs/not-a-cell.h5
run_rc "$ATTNSWEEP" run grid.json --out out --workers 2
check "rerun exits 0" test "$RC" = 0
check "the four bad files were moved aside" test "$(ls out/runs/*.h5.invalid | wc -l)" = 4
check "exactly four cells were recomputed" test "$(count_events out started)" = 4
check "6 valid results again" test "$(ls out/runs/*.h5 | wc -l)" = 6
