# The command task's failures, each that cell's alone and named: a crash (retried, as a
# built-in cell's), a hang (killed at --timeout-s), a malformed metrics line (file:line)
# and an exit 0 without a final record (neither retried: they would repeat), and a program that ignores SIGTERM (killed after
# grace_s; the run still exits 75 and the rerun completes it). The ok cell completes.
source "$(dirname "$0")/lib.bash"
command_test_setup
cat > grid.json <<JSON
{"name": "own-failures",
 "command": {"argv": ["$PY", "$PROG", "{mode}"], "keys": {"mode": "string", "lr": {"type": "number", "default": 0.1}}},
 "axes": {"task": ["command"], "mode": ["ok", "crash", "hang", "malformed", "nofinal"]},
 "resources": {"retries": 1}}
JSON
# The hang is the one cell a timeout applies to: its own run, once (the others have none).
sed 's/"mode": \["ok", "crash", "hang", "malformed", "nofinal"\]/"mode": ["hang"]/' grid.json > hang.json
run_rc timeout 300 "$ATTNSWEEP" run hang.json --out hang --workers 1 --timeout-s 10 --retries 0
check "the hung cell failed at its timeout (rc $RC: $ERR)" test "$RC" = 1 -a -z "$(ls hang/runs)"
check "its reason says so" grep -q '"event":"failed".*timed out after 10' hang/events.jsonl
check "the hung program went with its cell (it is in the cell's process group)" \
  test -z "$(pgrep -f 'command_pro[g].py hang' || true)"
sed -i 's/"mode": \["ok", "crash", "hang", "malformed", "nofinal"\]/"mode": ["ok", "crash", "malformed", "nofinal"]/' grid.json
run_rc timeout 300 "$ATTNSWEEP" run grid.json --out out --workers 2 --backoff-s 0.1
check "exit code 1: some cells failed (got $RC: $ERR)" test "$RC" = 1
check "the ok cell completed, alone" test "$(ls out/runs/*.h5 | wc -l)" = 1
check "each failure is named in events.jsonl and the cell's log" $PY - out <<'PY'
import json, sys
d = sys.argv[1]
ev = [json.loads(l) for l in open(d + "/events.jsonl")]
mode = {}
for e in ev:
    if "cell_id" in e and e["cell_id"] not in mode:
        mode[e["cell_id"]] = json.load(open(f"{d}/cells/{e['cell_id']}.json"))["mode"]
def of(m, kind):
    return [e for e in ev if mode.get(e.get("cell_id")) == m and e["event"] == kind]
def log(m):
    cid = next(c for c, x in mode.items() if x == m)
    return open(f"{d}/logs/{cid}.log").read()
expect = {
    "crash": "ended: killed by signal 11 (SIGSEGV)",
    "malformed": "metrics.jsonl:2: not a JSON line",
    "nofinal": "exited 0 without a final record",
}
for m, text in expect.items():
    # a crash is retried; a malformed line or a missing final record would only repeat
    assert len(of(m, "started")) == (2 if m == "crash" else 1), (m, of(m, "started"))
    assert len(of(m, "failed")) == 1, (m, of(m, "failed"))
    reason = of(m, "failed")[0]["reason"]
    assert text in reason and text in log(m), (m, reason)
    assert ("not retried" in reason) == (m != "crash"), (m, reason)
assert len(of("ok", "finished")) == 1 and not of("ok", "retried"), of("ok", "retried")
PY

# A program that ignores SIGTERM: killed after grace_s, the run exits 75 (resumable), and
# the rerun (the program behaving now) completes the cell.
cat > ignore.json <<JSON
{"name": "own-ignores",
 "command": {"argv": ["$PY", "$PROG", "ignore_term"], "keys": {"lr": "number", "steps": "integer"}},
 "axes": {"task": ["command"]}, "fixed": {"lr": 0.1, "steps": 3, "grace_s": 1}}
JSON
"$ATTNSWEEP" run ignore.json --out ign --workers 1 2>ign_err.txt &
pid=$!
for _ in $(seq 600); do [ -e ignoring ] && break; sleep 0.1; done
check "the program is running and ignoring the signal" test -e ignoring
kill -TERM $pid
for _ in $(seq 1200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then
  kill -KILL $pid
  fail "the run did not exit within 120 s of SIGTERM (the program ignores it)"
fi
set +e; wait $pid; rc=$?; set -e
check "the run exits 75 although the program ignored SIGTERM (got $rc)" test "$rc" = 75
check "the cell's log says it was killed after grace_s" grep -q "did not exit within grace_s = 1 s of SIGTERM: killed" ign/logs/*.log
check "no result was written" test -z "$(ls ign/runs)"
touch behave
run_rc timeout 120 "$ATTNSWEEP" run ignore.json --out ign --workers 1
check "the rerun completes it (rc $RC: $ERR)" test "$RC" = 0 -a "$(ls ign/runs/*.h5 | wc -l)" = 1

# A program that exits 75 by itself (EX_TEMPFAIL, no stop asked for): a failed attempt,
# retried with back-off and counted, the run ending in bounded time with the cell failed
# and the program's own exit code named; before, it was resumed as "interrupted" forever.
cat > exit75.json <<JSON
{"name": "own-exit75",
 "command": {"argv": ["$PY", "$PROG", "exit75"], "keys": {"lr": "number"}},
 "axes": {"task": ["command"]}, "fixed": {"lr": 0.1}, "resources": {"retries": 2}}
JSON
run_rc timeout 120 "$ATTNSWEEP" run exit75.json --out e75 --workers 1 --backoff-s 0.1
check "the run ends, the cell failed: exit 1 (got $RC: $ERR)" test "$RC" = 1
check "three attempts, then failed, naming the program's 75" $PY - e75 <<'PY'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1] + "/events.jsonl")]
started = [e for e in ev if e["event"] == "started"]
failed = [e for e in ev if e["event"] == "failed"]
assert len(started) == 3, started
assert len(failed) == 1 and "exited 75 (EX_TEMPFAIL) though no stop was asked for" in failed[0]["reason"], failed
assert "exit code 65" not in failed[0]["reason"] and "interrupted" not in [e["event"] for e in ev], ev
PY
check "the exit-0-without-final failure names no exit code of attnsweep's" \
  bash -c "! grep -q 'exit code 65' out/events.jsonl"

# A malformed metrics line stops the cell at once (not after the program's whole run),
# naming the line; the failure leaves no checkpoint or metrics lines, so the fixed program
# reruns afresh; --no-resume starts a cell's program afresh too (#52).
cat > bad.json <<JSON
{"name": "own-bad",
 "command": {"argv": ["$PY", "$PROG", "badname"], "keys": {"lr": "number"}},
 "axes": {"task": ["command"]}, "fixed": {"lr": 0.1}}
JSON
t0=$(date +%s)
run_rc timeout 100 "$ATTNSWEEP" run bad.json --out bad --workers 1
t1=$(date +%s)
check "the bad line fails the cell (rc $RC: $ERR)" test "$RC" = 1
check "within seconds of the line, not after the program's 120 s (took $((t1 - t0)) s)" test $((t1 - t0)) -lt 60
check "the reason names the file, the line and the name" \
  grep -q '"event":"failed".*metrics.jsonl:1: \\"val-loss\\": expected a metric name.*stopped at this line' bad/events.jsonl
check "no checkpoint or metrics lines are left" test -z "$(ls bad/checkpoints)"
touch fixed
run_rc timeout 100 "$ATTNSWEEP" run bad.json --out bad --workers 1
check "the fixed program completes the cell on a rerun (rc $RC: $ERR)" test "$RC" = 0 -a "$(ls bad/runs/*.h5 | wc -l)" = 1
id=$(basename bad/runs/*.h5 .h5)
echo '[5, 0.5]' > "bad/checkpoints/$id.ckpt"
echo '{"step": 7, "val-loss": 1}' > "bad/checkpoints/$id.ckpt.metrics.jsonl"
run_rc timeout 100 "$ATTNSWEEP" run bad.json --out bad --workers 1 --no-resume
check "--no-resume recomputes it afresh (rc $RC: $ERR)" test "$RC" = 0
check "--no-resume: the program started, not resumed" bash -c "tail -5 bad/logs/$id.log | grep -q 'starting the program'"

# What W&B / Hydra / submitit users expect (#5): ATTNSWEEP_OUTPUT_DIR (DIR/outputs/ID,
# kept), ATTNSWEEP_CELL_ID, {args} as --key=value, metric names with /, NaN.
cat > outs.json <<JSON
{"name": "own-outputs",
 "command": {"argv": ["$PY", "$PROG", "outputs", "{args}"], "keys": {"lr": "number", "name": "string"}},
 "axes": {"task": ["command"], "lr": [0.1, 0.2]}, "fixed": {"name": "a b"}}
JSON
run_rc timeout 100 "$ATTNSWEEP" run outs.json --out outs --workers 2
check "the cells complete (rc $RC: $ERR)" test "$RC" = 0
"$ATTNSWEEP" aggregate outs >/dev/null
check "outputs kept under DIR/outputs/ID, with the id and the keys as --key=value" $PY - outs <<'PY'
import csv, os, sys
d = sys.argv[1]
ids = sorted(f[:-3] for f in os.listdir(d + "/runs"))
assert sorted(os.listdir(d + "/outputs")) == ids, (os.listdir(d + "/outputs"), ids)
for i in ids:
    words = open(f"{d}/outputs/{i}/weights.txt").read().split(" ", 1)
    assert words[0] == i, words
    assert words[1].strip() in ("--lr=0.1 --name=a b --seed=0", "--lr=0.2 --name=a b --seed=0"), words
rows = list(csv.DictReader(open(d + "/summary.csv")))
assert all(r["test/accuracy"] == "0.75" and r["test/loss"] == "" for r in rows), rows
PY
