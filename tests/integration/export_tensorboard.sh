# attnsweep export DIR --tensorboard OUT (docs/tensorboard.md): a tiny image grid (softmax
# and s³/√N, 3 seeds, 20 steps) run for real and exported, then read back with the
# `tensorboard` package's own reader (TB_VENV, default /opt/attnsweep-tb-venv, made by
# scripts/deps.sh): every cell is one run named <label>__<id>; every scalar's steps and
# values equal its result file's series (h5py; float32); the HParams plugin's experiment
# lists every config key with the grid's values and every final metric; each cell's session
# holds its config, its status and its final metrics, as the HParams view's table shows
# them. A damaged result file is skipped and named (as aggregate does); a second export
# replaces the first; bad usage exits 2 and an OUT that cannot be written exits 1.
# SKIPPED (77) without Fashion-MNIST or without the tensorboard venv.
source "$(dirname "$0")/lib.bash"
TB_VENV=${TB_VENV:-/opt/attnsweep-tb-venv}
TBPY=$TB_VENV/bin/python
"$TBPY" -c "import tensorboard" 2>/dev/null || {
  echo "SKIP: no tensorboard in $TB_VENV (scripts/deps.sh installs it; or set TB_VENV)"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${ATTNSWEEP_FASHION_MNIST_DIR:-}" ] || {
  echo "SKIP: Fashion-MNIST (Debian package dataset-fashion-mnist) is not installed"; exit 77; }

cat > image.json <<'EOF'
{
  "name": "image_tb",
  "axes": {"task": ["image"], "activation": ["softmax", "poly"], "seed": [0, 1, 2]},
  "fixed": {"degree": 3, "scale": "inv_sqrt_n", "prompt_length": 16, "layers": 2, "heads": 2, "dim": 16,
            "steps": 20, "warmup_steps": 5, "batch": 16, "log_every": 5, "eval_every": 10, "eval_batches": 2}
}
EOF
run_rc "$ATTNSWEEP" run image.json --out im --workers 2
check "the grid runs (got $RC: $ERR)" test "$RC" = 0
check "6 result files" test "$(ls im/runs/*.h5 | wc -l)" = 6
# A damaged result file: skipped and named, as aggregate skips it; the others are exported.
head -c 2000 "$(ls im/runs/*.h5 | head -1)" > im/runs/0123456789abcdef.h5

run_rc "$ATTNSWEEP" export im --tensorboard tb
check "export exits 0 (got $RC: $ERR)" test "$RC" = 0
# Exported again, as from another host (other file names): the event files of the first
# export are replaced, not read twice.
for f in $(find tb -name 'events.out.tfevents.*'); do mv "$f" "$(dirname "$f")/events.out.tfevents.1.elsewhere"; done
run_rc "$ATTNSWEEP" export im --tensorboard tb
check "a second export exits 0 (got $RC: $ERR)" test "$RC" = 0
echo "$OUT"
check "  and replaces the first's files" test -z "$(find tb -name '*.elsewhere')"
check "6 cells exported" grep -q "^exported 6 cells" <<<"$OUT"
check "the damaged file is named skipped ($ERR)" grep -q "skipped runs/0123456789abcdef.h5: " <<<"$ERR"
check "7 folders with one event file each (6 cells and the experiment)" \
  test "$(find tb -name 'events.out.tfevents.*' | wc -l)" = 7 -a "$(find tb -name 'events.out.tfevents.*' -printf '%h\n' | sort -u | wc -l)" = 7

# TensorBoard's reader: the scalars of every run (EventAccumulator) and what the HParams
# plugin serves its view (its own GetExperiment and ListSessionGroups handlers).
cat > read_tb.py <<'EOF'
import json, os, sys
from google.protobuf import json_format
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, event_accumulator, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import api_pb2, backend_context, get_experiment, list_session_groups

out = sys.argv[1]
runs = {}
for name in sorted(os.listdir(out)):
    if not os.path.isdir(os.path.join(out, name)):
        continue
    acc = event_accumulator.EventAccumulator(os.path.join(out, name), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    runs[name] = {tag: [[e.step, e.value] for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(out)
mux.Reload()
provider = data_provider.MultiplexerDataProvider(mux, out)
hp = backend_context.Context(base_plugin.TBContext(logdir=out, multiplexer=mux, data_provider=provider))
ctx = context.RequestContext()
experiment = get_experiment.Handler(ctx, hp, "", api_pb2.GetExperimentRequest()).run()
every_status = [api_pb2.STATUS_UNKNOWN, api_pb2.STATUS_SUCCESS, api_pb2.STATUS_FAILURE, api_pb2.STATUS_RUNNING]
request = api_pb2.ListSessionGroupsRequest(allowed_statuses=every_status, start_index=0, slice_size=1000)
groups = list_session_groups.Handler(ctx, hp, "", request).run()
json.dump({"runs": runs, "experiment": json_format.MessageToDict(experiment),
           "groups": json_format.MessageToDict(groups)}, sys.stdout)
EOF
"$TBPY" read_tb.py tb > tb.json 2> tb.err || { cat tb.err; fail "tensorboard's reader failed"; }

check "every scalar, hparam and final metric equals the result files'" $PY - im tb.json <<'PY'
import glob, json, os, sys
import h5py, numpy as np
d, got = sys.argv[1], json.load(open(sys.argv[2]))
runs, experiment, groups = got["runs"], got["experiment"], got["groups"].get("sessionGroups", [])

def flatten(j, prefix=""):
    out = {}
    for k, v in j.items():
        key = (prefix + "." if prefix else "") + k.replace("/", "_")
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out

def close(a, b):  # float32 of the file's value, NaN equal to NaN
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.allclose(a, b.astype(np.float32), rtol=1e-6, atol=0, equal_nan=True)

cells, points = {}, 0
for path in sorted(glob.glob(f"{d}/runs/*.h5")):
    if "0123456789abcdef" in path:
        continue
    with h5py.File(path, "r") as f:
        cid = f.attrs["cell_id"]
        cfg = flatten(json.loads(f.attrs["config"]))
        label = "softmax" if cfg["activation"] == "softmax" else "s3_sqrtN"
        run = f"{label}__{cid}"
        assert run in runs, (run, sorted(runs))
        want = {}
        for g in ["train", "eval"]:
            steps = f[f"{g}/step"][()].tolist()
            for name, ds in f[g].items():
                if name != "step":
                    want[f"{g}/{name}"] = (steps, ds[()])
        steps = f["train/step"][()].tolist()
        for n in ["attn_fro", "jac_fro"]:
            a = f[f"norms/{n}"][()]
            assert a.shape == (len(steps), 2, 2), a.shape
            for l in range(2):
                for h in range(2):
                    want[f"norms/{n}/layer{l}/head{h}"] = (steps, a[:, l, h])
        final = dict(f["final"].attrs)
        last = max(max(f["train/step"][()]), max(f["eval/step"][()]))
        for m, v in final.items():
            want[f"final/{m}"] = ([last], [v])
        status = f.attrs["status"]
    have = runs[run]
    assert sorted(have) == sorted(want), (run, sorted(set(have) ^ set(want)))
    for tag, (steps, values) in want.items():
        got_steps = [s for s, _ in have[tag]]
        assert got_steps == [int(s) for s in steps], (run, tag, got_steps, steps)
        assert close([v for _, v in have[tag]], values), (run, tag, have[tag], values)
        points += len(steps)
    cells[run] = (cfg, final, status)
assert sorted(runs) == sorted(cells), (sorted(runs), sorted(cells))

# The experiment: every config key, typed, with the values the grid takes; every final metric.
infos = {h["name"]: h for h in experiment["hparamInfos"]}
keys = sorted({k for cfg, _, _ in cells.values() for k in cfg})
assert sorted(infos) == keys, (sorted(infos), keys)
for k, h in infos.items():
    values = {cfg[k] for cfg, _, _ in cells.values() if k in cfg}
    kind = ("DATA_TYPE_BOOL" if all(isinstance(v, bool) for v in values) else
            "DATA_TYPE_FLOAT64" if all(isinstance(v, (int, float)) for v in values) else "DATA_TYPE_STRING")
    assert h["type"] == kind and sorted(h["domainDiscrete"]) == sorted(values), (k, h, values)
    # the view's first columns: the keys that tell cells apart (degree: softmax cells lack it)
    differs = len(values) > 1 or any(k not in cfg for cfg, _, _ in cells.values())
    assert h.get("differs", False) == differs, (k, h)
metrics = sorted(m["name"]["tag"] for m in experiment["metricInfos"])
assert metrics == sorted({f"final/{m}" for _, fin, _ in cells.values() for m in fin}), metrics

# One session group per cell, as the HParams table lists them: its config (degree only
# where the cell has it), its status, its final metrics.
assert sorted(g["name"] for g in groups) == sorted(cells), [g["name"] for g in groups]
for g in groups:
    cfg, final, status = cells[g["name"]]
    assert g["hparams"] == cfg, (g["name"], g["hparams"], cfg)
    (session,) = g["sessions"]
    assert session["status"] == ("STATUS_SUCCESS" if status == "complete" else "STATUS_FAILURE"), session
    shown = {m["name"]["tag"]: m["value"] for m in g["metricValues"]}
    assert sorted(shown) == sorted(f"final/{m}" for m in final), shown
    assert all(close(shown[f"final/{m}"], v) for m, v in final.items()), (shown, final)
assert sum("degree" in cfg for cfg, _, _ in cells.values()) == 3  # poly's; softmax takes no degree
print(f"  {len(cells)} runs, {points} scalar points and {len(infos)} hparams equal the result files'")
PY

# Bad usage: exit 2, nothing written; an OUT that cannot be written: exit 1, named.
run_rc "$ATTNSWEEP" export
check "no DIR: exit 2 (got $RC)" test "$RC" = 2
run_rc "$ATTNSWEEP" export im
check "no --tensorboard: exit 2 naming it (got $RC: $ERR)" test "$RC" = 2 -a -n "$(grep -- --tensorboard <<<"$ERR")"
run_rc "$ATTNSWEEP" export nowhere --tensorboard tb2
check "DIR not a run directory: exit 2 naming it (got $RC: $ERR)" test "$RC" = 2 -a -n "$(grep 'nowhere: no runs/' <<<"$ERR")"
check "  and no OUT made" test ! -e tb2
touch afile
run_rc "$ATTNSWEEP" export im --tensorboard afile/tb
check "OUT under a file: exit 1 naming it (got $RC: $ERR)" test "$RC" = 1 -a -n "$(grep 'afile/tb: cannot create' <<<"$ERR")"
run_rc "$ATTNSWEEP" export im --tensorboard afile
check "OUT a file: exit 1 naming it (got $RC: $ERR)" test "$RC" = 1 -a -n "$(grep 'afile: cannot create' <<<"$ERR")"
run_rc "$ATTNSWEEP" export --help
check "--help exits 0 and names --tensorboard" test "$RC" = 0 -a -n "$(grep -- --tensorboard <<<"$OUT")"
