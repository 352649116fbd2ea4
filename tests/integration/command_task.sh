# The command task (docs/own-code.md): a grid that runs the user's own program. Its
# declared keys are validated like built-in ones (exit 2, the file and the JSON path);
# values reach it as single arguments, never through a shell; it finds the config, the
# metrics file, the checkpoint path, the scratch directory and the Python helper in its
# environment; its metrics lines become the result file, and aggregate reads them.
source "$(dirname "$0")/lib.bash"
command_test_setup
cat > grid.json <<JSON
{"name": "own",
 "command": {"argv": ["$PY", "$PROG", "{mode}", "--lr={lr}", "{name}", "{{literal}}"],
             "keys": {"mode": {"type": "string", "choices": ["ok", "slow"]}, "lr": {"type": "number", "min": 0},
                      "name": {"type": "string", "default": "x; rm -rf ~"}, "steps": "integer"}},
 "axes": {"task": ["command"], "lr": [0.1, 0.2], "seed": [0, 1]},
 "fixed": {"mode": "ok", "steps": 6}}
JSON
run_rc "$ATTNSWEEP" plan grid.json
check "plan: 4 cells (rc $RC: $ERR)" test "$RC" = 0
check "plan lists the declared key lr" grep -q '"lr"\|lr' <<<"$OUT"

# Validation: a declared key's value, an undeclared key, a bad type, a placeholder.
sed 's/"lr": \[0.1, 0.2\]/"lr": [0.1, "fast"]/' grid.json > bad_value.json
run_rc "$ATTNSWEEP" plan bad_value.json
check "a string for a number key: exit 2 (got $RC)" test "$RC" = 2
check "names file, path and type ($ERR)" grep -q 'bad_value.json: axes.lr\[1\]: expected a number >= 0, got "fast"' <<<"$ERR"
sed 's/"axes": {/"axes": {"lrr": [1],/' grid.json > misspelt.json
run_rc "$ATTNSWEEP" plan misspelt.json
check "a misspelt declared key: exit 2 with did-you-mean ($ERR)" \
  grep -q 'misspelt.json: axes.lrr: unknown key (did you mean "lr"?)' <<<"$ERR"
sed 's/"steps": "integer"/"steps": "integr"/' grid.json > badtype.json
run_rc "$ATTNSWEEP" plan badtype.json
check "an unknown type: exit 2 ($ERR)" grep -q 'badtype.json: command.keys.steps: unknown type "integr" (did you mean "integer"?)' <<<"$ERR"
sed 's/{mode}/{mdoe}/' grid.json > placeholder.json
run_rc "$ATTNSWEEP" plan placeholder.json
check "an unknown placeholder: exit 2 ($ERR)" grep -q 'placeholder.json: command: argv\[2\] "{mdoe}": {mdoe} is not a key of the cell (did you mean mode?)' <<<"$ERR"
sed 's/"steps": "integer"/"seed": "integer"/' grid.json > reserved.json
run_rc "$ATTNSWEEP" plan reserved.json
check "a key every cell has (seed) cannot be declared ($ERR)" grep -q 'reserved.json: command.keys.seed: every command cell has this key' <<<"$ERR"
check "nothing was written by the bad plans" test ! -e out

run_rc "$ATTNSWEEP" run grid.json --out out --workers 2 --retries 0
check "run exits 0 (rc $RC: $ERR)" test "$RC" = 0
check "4 result files" test "$(ls out/runs/*.h5 | wc -l)" = 4
results_valid out

check "the program got each value as one argument, the shell's ; included" $PY - "$WORK" <<'PY'
import glob, json, os, sys
seen = [json.load(open(f)) for f in glob.glob(sys.argv[1] + "/seen-*-ok.json")]
assert len(seen) == 2 * 2 or len(seen) == 2, len(seen)  # per seed; lr cells overwrite each other
for s in seen:
    argv, env, cfg = s["argv"], s["env"], s["config"]
    assert argv[0] == "ok" and argv[1] == "--lr=" + json.dumps(cfg["lr"]), argv
    assert argv[2] == "x; rm -rf ~" and argv[3] == "{literal}", argv
    for k in ("ATTNSWEEP_CONFIG", "ATTNSWEEP_METRICS", "ATTNSWEEP_CHECKPOINT", "ATTNSWEEP_SCRATCH"):
        assert k in env, (k, env)
    assert env["ATTNSWEEP_CHECKPOINT"].endswith(".ckpt") or "/checkpoints/" in env["ATTNSWEEP_CHECKPOINT"], env
    assert env["ATTNSWEEP_METRICS"] == env["ATTNSWEEP_CHECKPOINT"] + ".metrics.jsonl", env
    assert env["ATTNSWEEP_KEY_name"] == "x; rm -rf ~", env
    assert s["scratch_exists"] and cfg["task"] == "command" and cfg["steps"] == 6, s
assert os.path.isdir(os.path.expanduser("~")), "the home directory is still there"
PY
check "the result file holds the trajectories, the final metrics and the config" $PY - out <<'PY'
import glob, json, sys, h5py, numpy as np
for f in glob.glob(sys.argv[1] + "/runs/*.h5"):
    with h5py.File(f) as h:
        cfg = json.loads(h.attrs["config"])
        lr = cfg["lr"]
        assert list(h["/train/step"][()]) == list(range(6)), h["/train/step"][()]
        w = 1.0
        losses = []
        for s in range(6):
            w -= lr * w
            losses.append(0.5 * w * w)
        np.testing.assert_allclose(h["/train/loss"][()], losses, rtol=1e-6)
        assert h["/train/loss"].dtype == np.float32 and "description" in h["/train/loss"].attrs
        np.testing.assert_allclose(h["/final"].attrs["test_accuracy"], 1.0 - w, rtol=1e-12)
        assert h.attrs["status"] == "complete", h.attrs["status"]
PY
check "no checkpoint or metrics file is left once the results are written" test -z "$(ls out/checkpoints)"
check "no scratch directory is left" test -z "$(ls "$TMPDIR")"
check "the program's output is in the cell's log" grep -q "starting the program" out/logs/*.log

run_rc "$ATTNSWEEP" run grid.json --out out --workers 2
check "a rerun runs nothing (rc $RC)" test "$RC" = 0 -a "$(count_events out started)" = 0

run_rc "$ATTNSWEEP" aggregate out
check "aggregate exits 0 ($ERR)" test "$RC" = 0
check "summary.csv has the declared keys and the program's final metrics" $PY - out/summary.csv <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert len(rows) == 4, rows
for c in ("lr", "seed", "mode", "test_accuracy", "test_loss", "w", "status"):
    assert c in rows[0], (c, list(rows[0]))
PY
check "aggregate.h5 has the program's trajectories" $PY - out/aggregate.h5 <<'PY'
import sys, h5py
with h5py.File(sys.argv[1]) as f:
    t = f["trajectories"]
    names = list(t)
    assert any("loss" in n for n in names) and any("accuracy" in n for n in names), names
    loss = [n for n in names if n.endswith("loss")][0]
    assert t[loss].shape[0] == 4, t[loss].shape
PY
