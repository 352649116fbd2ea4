#!/usr/bin/env bash
# `attnsweep train` of the image task stopped by SIGTERM (exit 75, checkpoint left),
# resumed, and compared dataset by dataset, byte for byte, with an uninterrupted run;
# the checkpoint is gone afterwards. SKIPPED (77) without Fashion-MNIST or h5py.
set -euo pipefail
: "${ATTNSWEEP:?set ATTNSWEEP to the attnsweep binary}"
py=/usr/bin/python3
[[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]] || { echo "SKIPPED: no dataset-fashion-mnist"; exit 77; }
"$py" -c "import h5py" 2>/dev/null || { echo "SKIPPED: $py lacks h5py"; exit 77; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/cell.json" <<'JSON'
{"task": "image", "prompt_length": 16, "activation": "poly", "degree": 3, "scale": "inv_sqrt_n",
 "layers": 2, "heads": 2, "dim": 32, "steps": 6000, "batch": 32, "log_every": 10, "eval_every": 1500,
 "eval_batches": 2, "checkpoint_every": 0}
JSON
"$ATTNSWEEP" train "$tmp/cell.json" --out "$tmp/a.h5" --threads 1 >/dev/null

"$ATTNSWEEP" train "$tmp/cell.json" --out "$tmp/b.h5" --threads 1 --checkpoint "$tmp/b.ckpt" &
pid=$!
sleep 1  # the whole run takes about 5 s on an idle 2-core machine (1200 steps once finished within 1 s)
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?
if [[ $rc -ne 75 ]]; then echo "FAIL: stopped run exited $rc, expected 75 (did it finish within 1 s?)"; exit 1; fi
[[ -s "$tmp/b.ckpt" ]] || { echo "FAIL: no checkpoint after SIGTERM"; exit 1; }
[[ ! -e "$tmp/b.h5" ]] || { echo "FAIL: a result file after an interrupted run"; exit 1; }
"$ATTNSWEEP" train "$tmp/cell.json" --out "$tmp/b.h5" --threads 1 --checkpoint "$tmp/b.ckpt" 2>"$tmp/resume.err" >/dev/null
grep -q "resuming from" "$tmp/resume.err" || { echo "FAIL: the second run did not resume"; cat "$tmp/resume.err"; exit 1; }
[[ ! -e "$tmp/b.ckpt" ]] || { echo "FAIL: checkpoint left after the result was written"; exit 1; }
"$py" - "$tmp/a.h5" "$tmp/b.h5" <<'PY'
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
bad = [n for n in names if a[n][()].tobytes() != b[n][()].tobytes()]
if bad or not names:
    sys.exit(f"FAIL: datasets differ after resume: {bad}")
fa, fb = dict(a["final"].attrs), dict(b["final"].attrs)
if fa != fb:
    sys.exit(f"FAIL: /final differs: {fa} vs {fb}")
print(f"trainer_resume: {len(names)} datasets identical after SIGTERM + resume ({a.attrs['status']})")
PY
grep -o 'resuming from .*' "$tmp/resume.err"
