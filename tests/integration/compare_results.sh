#!/usr/bin/env bash
# scripts/compare_results.py, the refactor check of scripts/compare_results.sh: two runs
# of the same grid compare identical (the runs are deterministic), and a one-bit change
# planted in one dataset, a missing file, or a changed attribute are each reported.
source "$(dirname "$0")/lib.bash"
CMP="$PY $SRC/scripts/compare_results.py"
for d in a b; do
  "$ATTNSWEEP" run "$SRC/experiments/grids/paperB_concentration_small.json" --out "$WORK/$d" --workers 2 >/dev/null 2>&1
done
check "two runs of one grid are identical, and a planted bit flip is caught" $CMP --plant "$WORK/a" "$WORK/b"
f=$(ls "$WORK/b/runs" | head -1)
$PY - "$WORK/b/runs/$f" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r+") as h:
    h.attrs["status"] = "diverged"
PY
run_rc $CMP "$WORK/a" "$WORK/b"
check "a changed root attribute is a difference" test "$RC" = 1
check "... named with its file" grep -q "$f /: attributes differ" <<<"$OUT"
rm "$WORK/b/runs/$f"
run_rc $CMP "$WORK/a" "$WORK/b"
check "a missing result file is a difference" test "$RC" = 1
check "... named" grep -q "$f: only in $WORK/a" <<<"$OUT"
