# attnsweep report: a reduced norm-probe sweep and a tiny trained sweep (the image task
# on Fashion-MNIST: 2 activations x 2 prompt lengths x 2 seeds, 40 steps), both run for
# real, and a fake trained sweep with diverged and failed cells (bench/aggregate_gen
# writes cells in the trained schema) each become one self-contained report.html;
# headless Chromium renders the pages, and the screenshots must not be blank and must
# show as many <img> as the script made figures. Bad files in runs/ are skipped and
# listed; a second aggregate rereads nothing; the loading snippet of docs/results-schema.md
# (contract.md's h5py/pandas one, extended) runs on an aggregate; a Python without
# matplotlib gives exit 2 naming the Debian packages.
# SKIPPED (77) only when Chromium is missing and cannot be installed.
source "$(dirname "$0")/lib.bash"

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ] && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >/dev/null 2>&1 || true
  CHROMIUM=$(command -v chromium || true)
fi
[ -n "$CHROMIUM" ] || { echo "SKIP: chromium is not installed (Debian: apt-get install chromium)"; exit 77; }
GEN=$BUILD/bench/aggregate_gen
[ -x "$GEN" ] || fail "$GEN not built"

# screenshot PAGE PNG: renders the page at 1200 px wide
screenshot() {
  "$CHROMIUM" --headless --no-sandbox --disable-gpu --hide-scrollbars --user-data-dir="$(mktemp -d "$WORK/chrome.XXXXXX")" \
    --screenshot="$2" --window-size=1200,3000 "file://$1" >/dev/null 2>&1 || true
  test -s "$2"
}
# not_blank PNG: many distinct colours and a fair share of non-background pixels
not_blank() {
  $PY - "$1" <<'PY'
import sys
from PIL import Image
im = Image.open(sys.argv[1]).convert("RGB").resize((400, 1000))
px = list(im.getdata())
colours = len(set(px))
bg = max(set(px), key=px.count)
ink = sum(1 for p in px if sum(abs(a - b) for a, b in zip(p, bg)) > 40) / len(px)
print(f"  {sys.argv[1]}: {colours} colours, {ink:.1%} non-background")
sys.exit(0 if colours > 64 and ink > 0.03 else 1)
PY
}
img_count() { grep -o '<img ' "$1" | wc -l; }

# ---- 1. the norm-probe demo grid, reduced --------------------------------------------
cat > grid.json <<'EOF'
{
  "name": "norm_probe_small",
  "axes": {
    "task": ["norm_probe"],
    "activation": ["softmax", "poly", "relu"],
    "degree": [3],
    "scale": ["inv_sqrt_n", "inv_n"],
    "prompt_length": [16, 64, 256],
    "seed": [0, 1]
  },
  "fixed": {"samples": 8},
  "exclude": [{"activation": "poly", "scale": "inv_n"}, {"activation": "relu", "scale": "inv_sqrt_n"}]
}
EOF
run_rc "$ATTNSWEEP" run grid.json --out np --workers 2
check "run exits 0 (got $RC: $ERR)" test "$RC" = 0
check "18 result files" test "$(ls np/runs/*.h5 | wc -l)" = 18

run_rc "$ATTNSWEEP" report np
check "report exits 0 (got $RC: $ERR)" test "$RC" = 0
echo "$OUT"
check "report aggregated first (no aggregate.h5)" grep -q "aggregating first" <<<"$OUT"
check "np/report.html written" test -s np/report.html
FIGS=$(sed -n 's/^figures: //p' <<<"$OUT")
check "norm-probe report has the norm-law figure (figures: $FIGS)" test "$FIGS" = 1
check "one <img> per figure" test "$(img_count np/report.html)" = "$FIGS"
check "page is self-contained (no src to a file)" bash -c "! grep -Eo 'src=\"[^d\"][^\"]*\"' np/report.html | grep -q ."
check "header names the grid" grep -q "norm_probe_small" np/report.html
check "screenshot of the norm-probe page" screenshot "$WORK/np/report.html" "$WORK/np.png"
check "norm-probe screenshot is not blank" not_blank "$WORK/np.png"

# A re-aggregate reads nothing; a truncated and a non-HDF5 file are skipped and listed.
run_rc "$ATTNSWEEP" aggregate np
check "second aggregate rereads nothing ($OUT)" grep -q "aggregated 18 cells (0 read, 18 unchanged)" <<<"$OUT"
runs=(np/runs/*.h5); first=${runs[0]}
head -c 3000 "$first" > np/runs/00000000truncated.h5
echo "not hdf5" > np/runs/00000000000text.h5
run_rc "$ATTNSWEEP" aggregate np
check "aggregate with bad files exits 0 (got $RC)" test "$RC" = 0
check "aggregate still has 18 cells" grep -q "aggregated 18 cells (0 read, 18 unchanged) (2 files skipped)" <<<"$OUT"
check "truncated file listed" grep -q "skipped runs/00000000truncated.h5: truncated file" <<<"$ERR"
check "non-HDF5 file listed" grep -q "skipped runs/00000000000text.h5: not an HDF5 file" <<<"$ERR"
run_rc "$ATTNSWEEP" report np
check "report with bad files exits 0" test "$RC" = 0
check "report lists the skipped files" grep -q "00000000truncated.h5: truncated file" np/report.html

# ---- 2. a tiny trained sweep, run for real ---------------------------------------------
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "no Fashion-MNIST (Debian: dataset-fashion-mnist)"
cat > image.json <<'EOF'
{
  "name": "image_tiny",
  "axes": {"task": ["image"], "activation": ["softmax", "relu"], "prompt_length": [16, 49], "seed": [0, 1]},
  "fixed": {"scale": "inv_n", "layers": 2, "heads": 2, "dim": 16, "steps": 40, "batch": 16,
            "log_every": 5, "eval_every": 20, "eval_batches": 2}
}
EOF
run_rc "$ATTNSWEEP" run image.json --out im --workers 2
check "trained sweep exits 0 (got $RC: $ERR)" test "$RC" = 0
check "8 trained result files" test "$(ls im/runs/*.h5 | wc -l)" = 8
run_rc "$ATTNSWEEP" report im
check "trained report exits 0 (got $RC: $ERR)" test "$RC" = 0
echo "$OUT"
FIGS=$(sed -n 's/^figures: //p' <<<"$OUT")
check "trained report has 4 figures (got $FIGS)" test "$FIGS" = 4
check "one <img> per figure" test "$(img_count im/report.html)" = "$FIGS"
for title in "Norms over training, per layer" "Accuracy against prompt length" "Paired comparison of activations" \
             "Training loss"; do
  check "trained report has the figure '$title'" grep -q "<h2>Figure [0-9]. $title</h2>" im/report.html
done
# What the four figures are drawn from: per-layer norm trajectories of every cell,
# test accuracy of 2 seeds per activation and prompt length (the error bars; and the
# 2 softmax-relu pairs per prompt length of the paired figure, aggregate.h5 /paired),
# loss curves of 2 seeds per panel (the bands).
check "aggregate of the trained sweep holds the figures' data" $PY - im/aggregate.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    c = {k: (f["cells"][k].asstr()[()] if f["cells"][k].dtype.kind == "O" else f["cells"][k][()]) for k in f["cells"]}
    for name in ("norms_attn_fro", "norms_jac_fro"):
        a = f["trajectories"][name][()]
        assert a.shape == (8, 9, 2, 2), (name, a.shape)  # 8 cells, steps 0..40 every 5, 2 layers, 2 heads
        assert np.isfinite(a).all() and (a > 0).all(), name
    p = {k: (f["paired"][k].asstr()[()] if f["paired"][k].dtype.kind == "O" else f["paired"][k][()]) for k in f["paired"]}
    sel = p["metric"] == "test_accuracy"
    assert sorted(p["prompt_length"][sel]) == [16, 49] and (p["pairs"][sel] == 2).all(), p
    loss = f["trajectories/train_loss"][()]
    assert loss.shape == (8, 9) and np.isfinite(loss).all(), loss.shape
    for act in ("softmax", "relu"):
        for n in (16, 49):
            sel = (c["activation"] == act) & (c["prompt_length"] == n) & (c["status"] == "complete")
            acc = c["test_accuracy"][sel]
            assert len(acc) == 2 and np.isfinite(acc).all() and sorted(c["seed"][sel]) == [0, 1], (act, n, acc)
print("   norms [8, 9, 2, 2] finite, 2 seeds of test_accuracy per activation and N, loss [8, 9]")
PY
check "screenshot of the trained page" screenshot "$WORK/im/report.html" "$WORK/im.png"
check "trained screenshot is not blank" not_blank "$WORK/im.png"

# The loading snippet of docs/results-schema.md (contract.md's, extended) on this aggregate.
$PY -c "import pandas" 2>/dev/null || fail "pandas is missing for $PY (Debian: python3-pandas; scripts/deps.sh installs it)"
awk '/^## Loading/ { on = 1 } on && /^```python/ { grab = 1; next } grab && /^```/ { exit } grab { print }' \
  "$SRC/docs/results-schema.md" | sed "s#DIR/#$WORK/im/#g" > snippet.py
check "the loading snippet was found in docs/results-schema.md" grep -q "pd.DataFrame" snippet.py
cat >> snippet.py <<'EOF'
assert len(cells) == 8 and {"cell_id", "activation", "prompt_length", "seed", "test_accuracy"} <= set(cells.columns), cells.columns
assert loss.shape == (8, 9), loss.shape
assert len(fits) == 0, fits  # no norm or paper-B metric in these cells
print("   loading snippet: cells", cells.shape)
EOF
check "the h5py/pandas loading snippet runs on the aggregate" $PY snippet.py
check "and pandas reads summary.csv" $PY -c "import pandas as pd; d = pd.read_csv('$WORK/im/summary.csv'); assert d.shape[0] == 8, d.shape"

# ---- 3. a fake trained sweep with diverged and failed cells ----------------------------
"$GEN" tr --cells 72 --steps 200 --layers 4 --heads 4 --procs 2
check "72 fake trained cells" test "$(ls tr/runs/*.h5 | wc -l)" = 72
run_rc "$ATTNSWEEP" report tr
check "trained report exits 0 (got $RC: $ERR)" test "$RC" = 0
echo "$OUT"
FIGS=$(sed -n 's/^figures: //p' <<<"$OUT")
check "trained report: norms over training, accuracy, paired and loss figures (figures: $FIGS)" test "$FIGS" = 4
check "one <img> per figure" test "$(img_count tr/report.html)" = "$FIGS"
check "header counts diverged and failed" $PY - tr/report.html <<'PY'
import re, sys
page = open(sys.argv[1]).read()
stat = dict((label, int(n)) for n, label in re.findall(r"<b>(\d+)</b><span>([a-z]+)</span>", page))
print("  ", stat)
assert stat["cells"] == 73 and stat["failed"] == 1 and stat["diverged"] == 2 and stat["complete"] == 70, stat
PY
check "screenshot of the trained page" screenshot "$WORK/tr/report.html" "$WORK/tr.png"
check "trained screenshot is not blank" not_blank "$WORK/tr.png"
if [ -n "${REPORT_SHOTS:-}" ]; then mkdir -p "$REPORT_SHOTS" && cp "$WORK"/np.png "$WORK"/im.png "$WORK"/tr.png "$WORK"/np/report.html "$REPORT_SHOTS"/ && cp im/report.html "$REPORT_SHOTS"/im.html && cp tr/report.html "$REPORT_SHOTS"/tr.html; fi

# A new file under runs/ makes the aggregate stale: report re-aggregates it.
"$GEN" tr2 --cells 1 --steps 200 --procs 1 && cp tr2/runs/*.h5 tr/runs/
run_rc "$ATTNSWEEP" report tr
check "report re-aggregates a stale aggregate.h5" grep -q "aggregating first" <<<"$OUT"

# ---- 4. no matplotlib: exit 2 naming the Debian packages ------------------------------
cat > nompl.sh <<'EOF'
#!/bin/sh
exec /usr/bin/python3 -c 'import sys; sys.modules["matplotlib"] = None; sys.argv = sys.argv[1:]; exec(compile(open(sys.argv[0]).read(), sys.argv[0], "exec"), {"__name__": "__main__"})' "$@"
EOF
chmod +x nompl.sh
run_rc "$ATTNSWEEP" report tr --python "$WORK/nompl.sh"
check "no matplotlib: exit 2 (got $RC)" test "$RC" = 2
check "no matplotlib: names python3-matplotlib and python3-h5py ($ERR)" grep -q "python3-matplotlib python3-h5py" <<<"$ERR"
run_rc "$ATTNSWEEP" report tr --python /nonexistent/python3
check "no python: exit 2" test "$RC" = 2
run_rc "$ATTNSWEEP" report nothing-here
check "no results dir: exit 2" test "$RC" = 2
run_rc "$ATTNSWEEP" report --help
check "report --help" grep -q "usage: attnsweep report DIR" <<<"$OUT"
