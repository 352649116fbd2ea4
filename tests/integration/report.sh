# attnsweep report: a reduced norm-probe sweep and a tiny trained sweep (the image task
# on Fashion-MNIST: 2 activations x 2 prompt lengths x 3 seeds, 40 steps), both run for
# real, and a fake trained sweep with diverged and failed cells (bench/aggregate_gen
# writes cells in the trained schema) each become one self-contained report.html;
# headless Chromium renders the pages, and the screenshots must not be blank and must
# show as many <img> as the script made figures. Bad files in runs/ are skipped and
# listed; a second aggregate rereads nothing; the loading snippet of docs/results-schema.md
# (docs/results-schema.md's h5py/pandas one) runs on an aggregate; a Python without
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
# descriptive PAGE: every caption describes its figure (what, from which cells, what budget)
# and claims nothing: no verdict words; each names its budget ("N complete cells").
descriptive() {
  $PY - "$1" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
caps = [html.unescape(c) for c in re.findall(r"<figcaption>(.*?)</figcaption>", page, re.S)]
assert caps, "no caption"
claims = re.compile(r"reproduc|confirm|predict|verif|demonstrat|agrees|consistent with|as expected|theorem|paper [AB]"
                    r"|lacked|shows that|proves", re.I)
for c in caps:
    assert not claims.search(c), f"caption claims: {claims.search(c).group(0)!r} in {c!r}"
    assert re.search(r"\d+ complete cells?", c), f"caption names no budget: {c!r}"
print(f"  {len(caps)} captions, descriptive")
PY
}
# plotted PAGE TITLE: the JSON a figure carries in data-plotted (what it plots)
plotted() {
  $PY - "$1" "$2" <<'PY'
import html, json, re, sys
page = open(sys.argv[1], encoding="utf-8").read()
for title, data in re.findall(r'<h2>Figure \d+\. (.*?)</h2><figure data-plotted="(.*?)">', page, re.S):
    if html.unescape(title) == sys.argv[2]:
        print(html.unescape(data))
        sys.exit(0)
sys.exit(f"no figure {sys.argv[2]!r}")
PY
}
# no_warnings: the report's stderr (ERR) holds no Python warning
no_warnings() { ! grep -q "Warning" <<<"$ERR"; }

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
check "norm-probe captions are descriptive" descriptive np/report.html
check "norm-probe report printed no warning ($ERR)" no_warnings

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

# The legend slopes are aggregate's fits, over its N range (--fit-min-n 64: N 64 and 256),
# each panel its own; ticks at the grid's N.
run_rc "$ATTNSWEEP" aggregate np --fit-min-n 64
check "aggregate --fit-min-n 64 exits 0" test "$RC" = 0
run_rc "$ATTNSWEEP" report np
check "report after aggregate --fit-min-n 64 exits 0" test "$RC" = 0
plotted np/report.html "Norm laws at initialisation" >np_plotted.json
check "legend slopes equal aggregate's /fits (fit over N >= 64)" $PY - np/aggregate.h5 np_plotted.json <<'PY'
import json, math, sys
import h5py, numpy as np
got = json.load(open(sys.argv[2]))
with h5py.File(sys.argv[1]) as f:
    fits = {(m, g): (s, lo) for m, g, s, lo in zip(f["fits/metric"].asstr()[()], f["fits/group"].asstr()[()],
                                                  f["fits/slope"][()], f["fits/n_min"][()])}
    c = {k: f["cells"][k].asstr()[()] if f["cells"][k].dtype.kind == "O" else f["cells"][k][()] for k in f["cells"]}
    fit_group = f["cell_groups/fit_group"].asstr()[()]
assert got["xticks"] == [16, 64, 256], got["xticks"]
for metric in ("attn_fro", "jac_fro"):
    slopes = got["slopes"][metric]
    want = {}
    for i in range(len(fit_group)):
        if (metric, fit_group[i]) in fits and c["label"][i]:
            want[c["label"][i]] = fits[(metric, fit_group[i])]
    assert set(slopes) == set(want) and len(want) == 3, (metric, slopes, want)
    for label, s in slopes.items():
        assert want[label][1] == 64 and math.isclose(s, want[label][0], rel_tol=0, abs_tol=1e-12), (metric, label, s, want[label])
    print(f"   {metric}: " + ", ".join(f"{k} {v:+.4f}" for k, v in slopes.items()))
assert got["slopes"]["attn_fro"] != got["slopes"]["jac_fro"]  # one legend each: the panels' slopes differ
PY

# ---- 2. a tiny trained sweep, run for real ---------------------------------------------
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "no Fashion-MNIST (Debian: dataset-fashion-mnist)"
cat > image.json <<'EOF'
{
  "name": "image_tiny",
  "axes": {"task": ["image"], "activation": ["softmax", "relu"], "prompt_length": [16, 49], "seed": [0, 1, 2]},
  "fixed": {"scale": "inv_n", "layers": 2, "heads": 2, "dim": 16, "steps": 40, "batch": 16,
            "log_every": 5, "eval_every": 20, "eval_batches": 2}
}
EOF
run_rc "$ATTNSWEEP" run image.json --out im --workers 2
check "trained sweep exits 0 (got $RC: $ERR)" test "$RC" = 0
check "12 trained result files" test "$(ls im/runs/*.h5 | wc -l)" = 12
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
        assert a.shape == (12, 9, 2, 2), (name, a.shape)  # 12 cells, steps 0..40 every 5, 2 layers, 2 heads
        assert np.isfinite(a).all() and (a > 0).all(), name
    p = {k: (f["paired"][k].asstr()[()] if f["paired"][k].dtype.kind == "O" else f["paired"][k][()]) for k in f["paired"]}
    sel = p["metric"] == "test_accuracy"
    assert sorted(p["prompt_length"][sel]) == [16, 49] and (p["pairs"][sel] == 3).all(), p
    loss = f["trajectories/train_loss"][()]
    assert loss.shape == (12, 9) and np.isfinite(loss).all(), loss.shape
    for act in ("softmax", "relu"):
        for n in (16, 49):
            sel = (c["activation"] == act) & (c["prompt_length"] == n) & (c["status"] == "complete")
            acc = c["test_accuracy"][sel]
            assert len(acc) == 3 and np.isfinite(acc).all() and sorted(c["seed"][sel]) == [0, 1, 2], (act, n, acc)
print("   norms [12, 9, 2, 2] finite, 3 seeds of test_accuracy per activation and N, loss [12, 9]")
PY
check "screenshot of the trained page" screenshot "$WORK/im/report.html" "$WORK/im.png"
check "trained screenshot is not blank" not_blank "$WORK/im.png"
check "trained captions are descriptive" descriptive im/report.html
check "trained report printed no warning ($ERR)" no_warnings
# The page as Chromium renders it: the paired figure's right panel holds every cell, 3
# seeds x 2 prompt lengths per activation, each pair joined (cls=false is the image
# task's default: with /cells/cls 0 against the pair's "cls=false" it held none).
"$CHROMIUM" --headless --no-sandbox --disable-gpu --user-data-dir="$(mktemp -d "$WORK/chrome.XXXXXX")" \
  --dump-dom "file://$WORK/im/report.html" >im_dom.html 2>/dev/null || true
check "Chromium rendered the trained page" grep -q "Paired comparison of activations" im_dom.html
plotted im_dom.html "Paired comparison of activations" >im_paired.json
check "paired panel: 6 points per activation, 6 pairs joined ($(cat im_paired.json))" $PY - im_paired.json <<'PY'
import json, sys
got = json.load(open(sys.argv[1]))["comparisons"]
assert len(got) == 1 and got[0]["points"] == {"softmax": 6, "ReLU/N": 6} and got[0]["pairs_joined"] == 6, got
PY
ACC=$(plotted im/report.html "Accuracy against prompt length")
check "accuracy: ticks at the grid's N ($ACC)" $PY -c "import json, sys; assert json.loads(sys.argv[1])['xticks'] == [16, 49]" "$ACC"
check "the table's first column is named by what it holds" grep -q "<th>activation</th><th>N</th><th>seeds</th>" im/report.html
check "captions give the test metrics' evaluation size (#52)" grep -q "test metrics on 2 test batches (" im/report.html
# summary.csv: softmax's scale is "none" (a groupby keeps it), `label` as in the report,
# the boolean cls as the grid writes it.
check "summary.csv: scale none, label, cls false" $PY - im/summary.csv <<'PY'
import csv, sys
import pandas as pd
rows = list(csv.DictReader(open(sys.argv[1])))
assert {(r["activation"], r["scale"], r["label"]) for r in rows} == {("softmax", "none", "softmax"), ("relu", "inv_n", "ReLU/N")}, rows
assert {r["cls"] for r in rows} == {"false"}, {r["cls"] for r in rows}
d = pd.read_csv(sys.argv[1], keep_default_na=False)
assert d.groupby(["activation", "scale"]).size().to_dict() == {("relu", "inv_n"): 6, ("softmax", "none"): 6}
PY

# A group with fewer steps (one 20-step cell beside the 40-step ones): its trajectories
# are NaN-padded past step 20, which numpy once warned about ("Mean of empty slice"); the
# table's first column is named by the parameters that name its groups; "1 seed".
cat > short.json <<'EOF'
{"name": "image_short", "axes": {"task": ["image"], "activation": ["softmax"], "prompt_length": [16], "seed": [0]},
 "fixed": {"scale": "inv_n", "layers": 2, "heads": 2, "dim": 16, "steps": 20, "batch": 16,
           "log_every": 5, "eval_every": 20, "eval_batches": 2}}
EOF
run_rc "$ATTNSWEEP" run short.json --out short --workers 1
check "the 20-step cell ran (got $RC: $ERR)" test "$RC" = 0
mkdir -p im2/runs && cp im/runs/*.h5 short/runs/*.h5 im2/runs/
run_rc "$ATTNSWEEP" report im2
check "report of 40- and 20-step cells exits 0 (got $RC)" test "$RC" = 0
check "report of 40- and 20-step cells printed no warning ($ERR)" no_warnings
check "the table's first column is headed by what names its groups" grep -q "<th>activation, steps</th><th>N</th>" im2/report.html
LEG=$(plotted im2/report.html "Training loss")
check "loss legends: 1 seed, 3 seeds ($LEG)" $PY -c "
import json, sys
labels = [l for panel in json.loads(sys.argv[1])['legends'] for l in panel]
assert 'softmax, steps=20 (1 seed)' in labels and 'softmax, steps=40 (3 seeds)' in labels, labels
assert not any('(1 seeds)' in l for l in labels), labels" "$LEG"

# The loading snippet of docs/results-schema.md  on this aggregate.
$PY -c "import pandas" 2>/dev/null || fail "pandas is missing for $PY (Debian: python3-pandas; scripts/deps.sh installs it)"
awk '/^## Loading/ { on = 1 } on && /^```python/ { grab = 1; next } grab && /^```/ { exit } grab { print }' \
  "$SRC/docs/results-schema.md" | sed "s#DIR/#$WORK/im/#g" > snippet.py
check "the loading snippet was found in docs/results-schema.md" grep -q "pd.DataFrame" snippet.py
cat >> snippet.py <<'EOF'
assert len(cells) == 12 and {"cell_id", "activation", "prompt_length", "seed", "test_accuracy", "label"} <= set(cells.columns), cells.columns
assert loss.shape == (12, 9), loss.shape
assert len(fits) == 0, fits  # no norm or paper-B metric in these cells
print("   loading snippet: cells", cells.shape)
EOF
check "the h5py/pandas loading snippet runs on the aggregate" $PY snippet.py
check "and pandas reads summary.csv" $PY -c "import pandas as pd; d = pd.read_csv('$WORK/im/summary.csv'); assert d.shape[0] == 12, d.shape"
# A default pandas groupby on the grid's keys keeps every row (#52): a key that does not
# apply (degree beside softmax and relu) is "none" in summary.csv, not an empty field (NaN).
check "a default groupby on the grid's keys keeps every row" $PY -c "
import pandas as pd
d = pd.read_csv('$WORK/np/summary.csv')
n = int(d.groupby(['activation', 'degree', 'scale', 'prompt_length']).size().sum())
assert n == len(d) == 18, (n, len(d), d[['activation', 'degree', 'scale']].drop_duplicates())
assert set(d['degree'].astype(str)) == {'3', 'none'}, set(d['degree'])"

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
check "fake trained captions are descriptive" descriptive tr/report.html
check "fake trained report printed no warning ($ERR)" no_warnings
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
