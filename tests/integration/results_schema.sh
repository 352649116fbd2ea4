#!/usr/bin/env bash
# One result schema (experiments/result_schema.cpp): docs/results-schema.md's table is the
# output of `attnsweep results-schema --markdown`, and aggregate's summary.csv columns for
# a small grid of three tasks are exactly those the declaration says: its fixed columns,
# then the config keys (sorted), then the /final metrics declared for the grid's tasks
# (sorted), then `label`, and its fits are of the metrics it marks fitted.
source "$(dirname "$0")/lib.bash"
"$ATTNSWEEP" results-schema --markdown >table.md
$PY - "$SRC/docs/results-schema.md" table.md <<'PY'
import sys
doc, gen = open(sys.argv[1]).read(), open(sys.argv[2]).read()
begin, end = "<!-- begin: attnsweep results-schema --markdown -->\n", "<!-- end: attnsweep results-schema --markdown -->"
if begin not in doc or end not in doc:
    sys.exit(f"FAIL: {sys.argv[1]}: no '{begin.strip()}' ... '{end}' block")
table = doc[doc.index(begin) + len(begin):doc.index(end)]
if table != gen:
    import difflib
    sys.stdout.writelines(difflib.unified_diff(table.splitlines(True), gen.splitlines(True), "docs", "generated"))
    sys.exit("FAIL: docs/results-schema.md's table differs from attnsweep results-schema --markdown (paste its output)")
print("ok: docs/results-schema.md's table is the output of attnsweep results-schema --markdown")
PY
"$ATTNSWEEP" results-schema --json >schema.json
cat >grid.json <<'J'
{"name": "schema_columns",
 "axes": {"task": ["norm_probe"], "activation": ["softmax", "relu"], "prompt_length": [16, 64], "seed": [0]},
 "fixed": {"samples": 4},
 "include": [{"task": "icl_regression", "activation": "softmax", "prompt_length": 16, "steps": 0, "test_prompts": 32},
             {"task": "icl_regression", "activation": "softmax", "prompt_length": 64, "steps": 0, "test_prompts": 32},
             {"task": "synthetic", "seconds": 0}]}
J
"$ATTNSWEEP" run grid.json --out out --workers 2 >run.log 2>&1 || { cat run.log; fail "the grid ran"; }
"$ATTNSWEEP" aggregate out >agg.log
$PY - schema.json out <<'PY'
import csv, glob, json, sys
import h5py
schema, out = json.load(open(sys.argv[1])), sys.argv[2]
configs = [json.load(open(p)) for p in glob.glob(f"{out}/cells/*.json")]
tasks = {c["task"] for c in configs}
def flat(d, prefix=""):
    for k, v in d.items():
        key = (prefix + "." if prefix else "") + k.replace("/", "_")
        if isinstance(v, dict) and v:
            yield from flat(v, key)
        else:
            yield key
params = sorted({k for c in configs for k in flat(c)})
metrics = sorted({f["name"] for f in schema["fields"]
                  if f["kind"] == "metric" and (not f["tasks"] or tasks & set(f["tasks"]))})
# A config key that would shadow a fixed column is config.<key>; a metric that would shadow
# an earlier column final.<metric> (synthetic's metric `seconds` is also its config key).
fixed = schema["columns"]
params = ["config." + k if k in fixed else k for k in params]
# ... then `label`, the activation as the report names it (results/table.h activation_label).
want = fixed + params + ["final." + m if m in fixed + params else m for m in metrics] + ["label"]
got = next(csv.reader(open(f"{out}/summary.csv")))
if got != want:
    sys.exit(f"FAIL: summary.csv columns\n  got  {got}\n  want {want}")
print(f"ok: summary.csv has the declared columns ({len(schema['columns'])} fixed, {len(params)} config keys, "
      f"{len(metrics)} metrics of {sorted(tasks)})")
with h5py.File(f"{out}/aggregate.h5") as f:
    fitted = {m.decode() for m in f["fits/metric"][()]}
    trajectories = set(f["trajectories"])
if not fitted or not fitted <= set(schema["fitted"]) or fitted != set(schema["fitted"]) & set(metrics):
    sys.exit(f"FAIL: /fits/metric {sorted(fitted)}, declared fitted {schema['fitted']}")
print(f"ok: /fits holds the declared fitted metrics of these tasks: {sorted(fitted)}")
declared = {f["trajectory_name"] for f in schema["fields"] if f.get("trajectory")}
if not trajectories or not trajectories <= declared:
    sys.exit(f"FAIL: /trajectories {sorted(trajectories)} not all declared ({sorted(declared)})")
print(f"ok: /trajectories holds declared trajectories only: {sorted(trajectories)}")
PY
