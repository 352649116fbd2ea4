# Live progress (worker/training/progress.h): a training cell's child reports its step, loss and
# rate every few seconds, as a line in its log and through DIR/progress/ into
# status.json; `status` and `status --json` show each running cell's step/steps, loss and
# steps/s, and the ETA comes from the steps done before any cell has finished. SIGTERM
# of the run: the cell's log says at which step it stopped. No clock is asserted: the test
# polls with a generous deadline and stops the run once it has seen what it checks.
source "$(dirname "$0")/lib.bash"
cat > grid.json <<'JSON'
{"name": "progress-demo",
 "axes": {"task": ["icl_regression"], "seed": [0, 1]},
 "fixed": {"activation": "softmax", "prompt_length": 8, "steps": 1000000000, "batch": 16, "lr": 0.01,
           "eval_every": 0, "log_every": 1000, "test_prompts": 64, "train_prompts": 4096}}
JSON
# One cell a process (--fuse 1): one running, one pending.
"$ATTNSWEEP" run grid.json --out out --workers 1 --threads 1 --fuse 1 >run.out 2>run.err &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; rm -rf "$WORK"' EXIT
# Polls `status DIR --json` until the Python check on standard input accepts it (up to 3
# minutes on a loaded machine; about 2 s when idle), then keeps it in JSON_OUT and the text
# status in TEXT_OUT. Fails (returns 1) if it never does.
wait_for_status() {
  local dir=$1 json_out=$2 text_out=$3 check_py
  check_py=$(cat)
  for _ in $(seq 1 900); do
    sleep 0.2
    [ -e "$dir/status.json" ] || continue
    if "$ATTNSWEEP" status "$dir" --json >"$json_out" 2>/dev/null && $PY -c "$check_py" "$json_out"; then
      "$ATTNSWEEP" status "$dir" >"$text_out"
      return 0
    fi
  done
  return 1
}
seen=""
wait_for_status out status.json status.txt <<'PY' && seen=yes
import json, sys
d = json.load(open(sys.argv[1]))
r = d["running_cells"]
assert d["state"] == "running" and d["complete"] == 0 and d["pending"] == 1, d
assert len(r) == 1 and r[0].get("step", 0) > 0, d
assert d["eta_s"] is not None and d["eta_s"] > 0, d
PY
cat status.json status.txt || true
check "status --json showed the running cell's step and an ETA before any cell finished" test -n "$seen"
check "status --json: step/steps, loss and steps/s of the running cell" $PY - status.json <<'PY'
import json, sys
(r,) = json.load(open(sys.argv[1]))["running_cells"]
assert r["steps"] == 1000000000 and 0 < r["step"] < r["steps"], r
assert isinstance(r["loss"], float) and r["steps_per_s"] > 0 and r["attempt"] == 1, r
PY
id=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["running_cells"][0]["cell_id"])' status.json)
check "status: the running cell's step, loss and rate" \
  grep -Eq "^  running $id \(init_seed=[01] seed=[01]\): step [0-9]+/1000000000, loss [-0-9.e+]+, [0-9.e+]+ steps/s$" status.txt
check "status: an ETA in seconds before any cell finished" grep -Eq "cells/s, ETA [0-9]+ s" status.txt
check "the cell's log has a progress line" \
  grep -Eq "^attnsweep progress: cell $id step [0-9]+/1000000000, loss [-0-9.e+]+, [0-9.e+]+ steps/s$" out/logs/$id.log
check "its progress file is under DIR/progress" test -s out/progress/$id.json

kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
cat out/logs/$id.log
check "the stopped run exits 75 (got $rc)" test "$rc" = 75
check "the cell's log says at which step the signal stopped it" \
  grep -Eq "^attnsweep train: cell $id interrupted by signal 15 \(SIGTERM\) at step [0-9]+ of 1000000000; checkpoint at " \
  out/logs/$id.log
check "status after the run: no running cell" $PY - <<PY
import json, subprocess
d = json.loads(subprocess.run(["$ATTNSWEEP", "status", "out", "--json"], capture_output=True, check=True, text=True).stdout)
assert d["running_cells"] == [] and d["eta_s"] is None, d
PY

# A command cell (the grid's own program, docs/own-code.md): its metrics lines give the
# step and loss as it runs; its `steps` key the total.
command_test_setup
cat > own.json <<JSON
{"name": "own-progress",
 "command": {"argv": ["$PY", "$PROG", "{mode}"],
             "keys": {"mode": {"type": "string"}, "lr": {"type": "number", "min": 0}, "steps": "integer"}},
 "axes": {"task": ["command"], "seed": [0]},
 "fixed": {"mode": "slow", "lr": 0.01, "steps": 100000}}
JSON
"$ATTNSWEEP" run own.json --out own --workers 1 >own.out 2>own.err &
pid=$!
seen=""
wait_for_status own own_status.json own_status.txt <<'PY' && seen=yes
import json, sys
r = json.load(open(sys.argv[1]))["running_cells"]
assert len(r) == 1 and r[0].get("step", 0) > 0 and r[0]["steps"] == 100000, r
PY
cat own_status.json own_status.txt || true
check "status --json showed the command cell's step from its metrics lines" test -n "$seen"
cid=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["running_cells"][0]["cell_id"])' own_status.json)
check "status: the command cell's step, loss and rate" \
  grep -Eq "^  running $cid: step [0-9]+/100000, loss [-0-9.e+]+, [0-9.e+]+ steps/s$" own_status.txt
check "the command cell's log has a progress line" \
  grep -Eq "^attnsweep progress: cell $cid step [0-9]+/100000, loss " own/logs/$cid.log
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
check "the stopped run exits 75 (got $rc)" test "$rc" = 75
