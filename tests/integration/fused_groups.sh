# Cells trained as one (run --fuse, coordinator/fusion.h, worker/training/cell_group.h): a grid of
# 33 paper B cells (2 activations x 4 initialisations x 2 data seeds x 2 prompt lengths,
# and one cell whose step size makes it diverge) run in groups and one cell a process
# gives identical result files; the diverging cell is recorded diverged while its group
# goes on. Then a slower grid, run in groups: kill -9 of a group's child (the attempt is
# retried from the cells' checkpoints) and SIGTERM of the run mid-group (exit 75, then a
# resume) both end with result files identical to an uninterrupted run. The same
# comparison on the op sequence (ATTNSWEEP_READOUT_ALGEBRA=0): a group then steps each
# cell's own model.
source "$(dirname "$0")/lib.bash"

cat > grid.json <<'JSON'
{"name": "fused", "axes": {"task": ["icl_regression"], "activation": ["softmax", "poly"],
  "prompt_length": [8, 24], "init_seed": [0, 1, 2, 3], "seed": [0, 1]},
 "include": [{"task": "icl_regression", "activation": "poly", "prompt_length": 8, "init_seed": 9, "seed": 0,
              "lr": 1000000.0}],
 "fixed": {"degree": 1, "scale": "inv_n", "steps": 200, "batch": 16, "lr": 0.1, "eval_every": 50, "log_every": 10,
           "test_prompts": 64, "train_prompts": 4096, "checkpoint_every": 40}}
JSON
run_rc "$ATTNSWEEP" plan grid.json --json --workers 1
check "plan exits 0" test "$RC" = 0
echo "$OUT" > plan.json
check "plan --json names each cell's group, alike cells together" $PY - plan.json <<'PY'
import json, sys
cells = json.load(open(sys.argv[1]))["cells"]
assert len(cells) == 33, len(cells)
groups = {}
for c in cells:
    groups.setdefault(c["group"], []).append(c)
    assert c["group_size"] == len([d for d in cells if d["group"] == c["group"]])
for g in groups.values():
    # one group: one prompt length (everything but the fusable keys agrees)
    assert len({c["config"]["prompt_length"] for c in g}) == 1, g
    assert len({c["fusion_key"] for c in g}) == 1
assert max(len(g) for g in groups.values()) == 16, [len(g) for g in groups.values()]
PY
# On 2 slots plan lists the groups run forms there: no more than the 17 alike cells of
# L = 8 over the slots, 9 (before, it listed groups of 16 that run never formed).
run_rc "$ATTNSWEEP" plan grid.json --json --workers 2
check "plan --workers 2: groups of at most 9, as run forms them" $PY -c \
  'import json,sys,collections; c=json.load(sys.stdin)["cells"]; n=collections.Counter(x["group"] for x in c); assert max(n.values()) == 9, n' <<<"$OUT"
run_rc "$ATTNSWEEP" plan grid.json --fuse 1 --json
check "plan --fuse 1: every cell its own group" $PY -c \
  'import json,sys; c=json.load(sys.stdin)["cells"]; assert len({x["group"] for x in c}) == 33' <<<"$OUT"

run_rc "$ATTNSWEEP" run grid.json --out fused --workers 2
check "fused run exits 0 ($ERR)" test "$RC" = 0
run_rc "$ATTNSWEEP" run grid.json --out alone --workers 2 --fuse 1
check "one cell a process exits 0" test "$RC" = 0
check "33 results each" test "$(ls fused/runs/*.h5 | wc -l)-$(ls alone/runs/*.h5 | wc -l)" = "33-33"
check "fused and alone: identical result files" $PY "$SRC/scripts/compare_results.py" fused alone
check "the fused run trained cells in groups of several, the other one cell a process" $PY - fused alone <<'PY'
import json, sys
def groups(d):
    return [e.get("group", [e["cell_id"]]) for e in map(json.loads, open(d + "/events.jsonl")) if e["event"] == "started"]
g = groups(sys.argv[1])
assert max(len(x) for x in g) >= 8 and len(g) == 33, [len(x) for x in g]
assert all(len(x) == 1 for x in groups(sys.argv[2]))
PY
check "the diverging cell diverged, the rest of its group completed" $PY - fused <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
status = {e["cell_id"]: e["status"] for e in ev if e["event"] == "finished"}
assert sorted(status.values()).count("diverged") == 1, status
bad = [c for c, s in status.items() if s == "diverged"][0]
mates = [e["group"] for e in ev if e["event"] == "started" and e["cell_id"] == bad][0]
assert len(mates) > 1 and all(status[c] == "complete" for c in mates if c != bad), mates
PY

# Without the read-out's algebra (the op sequence, what a task without it would run) a
# group steps each cell's own model on the shared batch: the same files again.
ATTNSWEEP_READOUT_ALGEBRA=0 run_rc "$ATTNSWEEP" run grid.json --out fused_ops --workers 2
check "fused run on the op sequence exits 0" test "$RC" = 0
ATTNSWEEP_READOUT_ALGEBRA=0 run_rc "$ATTNSWEEP" run grid.json --out alone_ops --workers 2 --fuse 1
check "fused and alone on the op sequence: identical result files" \
  $PY "$SRC/scripts/compare_results.py" fused_ops alone_ops

# ---- kill -9 and SIGTERM of groups -------------------------------------------------------
cat > slow.json <<'JSON'
{"name": "fused_slow", "axes": {"task": ["icl_regression"], "activation": ["softmax", "poly"],
  "prompt_length": [256], "init_seed": [0, 1, 2, 3], "seed": [0, 1]},
 "fixed": {"degree": 1, "scale": "inv_n", "steps": 12000, "batch": 32, "lr": 0.05, "eval_every": 3000,
           "log_every": 500, "test_prompts": 128, "checkpoint_every": 500}}
JSON
run_rc "$ATTNSWEEP" run slow.json --out ref --workers 2
check "uninterrupted slow run exits 0" test "$RC" = 0

# Waits until a checkpoint of a running group exists (the kill then loses only steps since).
wait_for_checkpoint() {
  for _ in $(seq 1 600); do
    ls "$1"/checkpoints/* >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  fail "no checkpoint appeared in $1"
}

"$ATTNSWEEP" run slow.json --out killed --workers 2 --backoff-s 0.2 >killed.log 2>&1 &
pid=$!
wait_for_checkpoint killed
sleep 0.3
child=$(pgrep -f "attnsweep train .*killed/cells/" | head -1)
check "a group's child is running" test -n "$child"
kill -9 "$child"
set +e; wait $pid; rc=$?; set -e
check "the run after kill -9 of a child exits 0 (got $rc)" test "$rc" = 0
check "its cells were retried" test "$(count_events killed retried)" -ge 2
check "kill -9 of a group's child, retried: identical to the uninterrupted run" \
  $PY "$SRC/scripts/compare_results.py" ref killed

"$ATTNSWEEP" run slow.json --out stopped --workers 2 >stopped.log 2>&1 &
pid=$!
wait_for_checkpoint stopped
sleep 0.3
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
check "SIGTERM mid-group exits 75 (got $rc)" test "$rc" = 75
check "the groups' cells were checkpointed, none finished" test "$(ls stopped/runs/*.h5 2>/dev/null | wc -l)" = 0
run_rc "$ATTNSWEEP" run slow.json --out stopped --workers 2
check "the resumed run exits 0" test "$RC" = 0
check "resumed from the checkpoints" \
  grep -q "resuming from" stopped/logs/*.log
check "SIGTERM mid-group, resumed: identical to the uninterrupted run" \
  $PY "$SRC/scripts/compare_results.py" ref stopped
