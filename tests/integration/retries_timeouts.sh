# Synthetic cells: a cell that crashes once is retried and completes; one that always
# crashes ends failed after its retries while the rest complete (exit 1); a hanging
# one is killed at its timeout; a failing one leaves its log.
source "$(dirname "$0")/lib.bash"
cat > grid.json <<'JSON'
{
  "name": "faults",
  "axes": {"task": ["synthetic"], "seed": [0, 1, 2, 3]},
  "fixed": {"seconds": 0.2},
  "include": [
    {"task": "synthetic", "seed": 10, "crash_attempts": 1},
    {"task": "synthetic", "seed": 11, "crash_attempts": 99},
    {"task": "synthetic", "seed": 12, "hang": true},
    {"task": "synthetic", "seed": 13, "exit_code": 3}
  ],
  "resources": {"retries": 2}
}
JSON
start=$(date +%s.%N)
run_rc "$ATTNSWEEP" run grid.json --out out --workers 3 --timeout-s 3 --backoff-s 0.1
took=$($PY -c "print(round($(date +%s.%N) - $start, 1))")
echo "$ERR"
check "exit code 1 when cells failed (got $RC)" test "$RC" = 1
check "5 cells complete (4 plain + crash-once)" test "$(ls out/runs/*.h5 | wc -l)" = 5
$PY - out <<'PY'
import json, sys, collections
d = sys.argv[1]
ev = [json.loads(l) for l in open(d + "/events.jsonl")]
cells = {c: json.load(open(f"{d}/cells/{c}.json")) for c in {e["cell_id"] for e in ev if "cell_id" in e}}
by_seed = {cfg["seed"]: cid for cid, cfg in cells.items()}
def events(seed, kind):
    return [e for e in ev if e.get("cell_id") == by_seed[seed] and e["event"] == kind]
# crash once: one retry, then finished on attempt 2
assert len(events(10, "retried")) == 1 and "SIGSEGV" in events(10, "retried")[0]["reason"], events(10, "retried")
assert events(10, "finished")[0]["attempt"] == 2
# always crashes: 3 attempts (1 + 2 retries), then failed
assert len(events(11, "started")) == 3 and len(events(11, "failed")) == 1, events(11, "started")
assert "SIGSEGV" in events(11, "failed")[0]["reason"]
# hangs: killed at the 3 s timeout on every attempt, then failed
assert len(events(12, "failed")) == 1 and "timed out" in events(12, "failed")[0]["reason"], events(12, "failed")
assert all("timed out" in e["reason"] for e in events(12, "retried"))
# exits 3: failed with its exit code
assert "exit code 3" in events(13, "failed")[0]["reason"]
for s in range(4):
    assert len(events(s, "finished")) == 1
st = json.load(open(d + "/status.json"))
assert st["failed"] == 3 and st["complete"] == 5 and st["state"] == "finished", st
print("ok: retry, failure, timeout and exit-code events as expected")
PY
crasher=$(grep -l '"crash_attempts": 99' out/cells/*.json); crasher=$(basename "$crasher" .json)
check "the always-crashing cell's log records its 3 attempts" test "$(grep -c '=== attnsweep: cell' out/logs/$crasher.log)" = 3
hanger=$(grep -l '"hang": true' out/cells/*.json); hanger=$(basename "$hanger" .json)
check "the hung cell's log says each attempt timed out (not only that a signal stopped it)" \
  test "$(grep -Ec "^attnsweep run: cell $hanger attempt [123] timed out after 3.0 s: stopping it" out/logs/$hanger.log)" = 3
# 3 hang attempts x 3 s + back-off: bounded well under a minute.
check "hung cell did not hold the sweep (took $took s)" $PY -c "assert $took < 40"
"$ATTNSWEEP" status out > status.txt; cat status.txt
check "status names the failed cells" grep -q "3 failed" status.txt
