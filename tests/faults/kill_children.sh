# kill -9 random training children during a 40-cell sweep: every cell still completes
# through its retries, and no result file is invalid.
source "$(dirname "$0")/../integration/lib.bash"
cat > grid.json <<'JSON'
{"name": "kill-children",
 "axes": {"task": ["synthetic"], "seed": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35]},
 "fixed": {"seconds": 0.6},
 "include": [{"task": "image", "prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 600, "batch": 16,
              "log_every": 20, "eval_every": 300, "checkpoint_every": 50, "seed": 0, "activation": "softmax"},
             {"task": "image", "prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 600, "batch": 16,
              "log_every": 20, "eval_every": 300, "checkpoint_every": 50, "seed": 1, "activation": "relu", "scale": "inv_n"},
             {"task": "norm_probe", "prompt_length": 256, "seed": 0},
             {"task": "norm_probe", "prompt_length": 256, "seed": 1}],
 "resources": {"retries": 8}}
JSON
"$ATTNSWEEP" run grid.json --out out --workers 3 --backoff-s 0.05 2>err.txt &
run=$!
kills=0
for _ in $(seq 200); do
  sleep 0.4
  kill -0 $run 2>/dev/null || break
  mapfile -t kids < <(pgrep -f "$ATTNSWEEP train" || true)
  [ ${#kids[@]} -gt 0 ] || continue
  victim=${kids[RANDOM % ${#kids[@]}]}
  kill -9 "$victim" 2>/dev/null && kills=$((kills + 1))
  [ $kills -ge 12 ] && break
done
set +e; wait $run; rc=$?; set -e
tail -2 err.txt
echo "killed $kills children with SIGKILL"
check "at least 8 children were killed" test $kills -ge 8
check "the sweep still exits 0 (got $rc)" test $rc = 0
check "40 result files" test "$(ls out/runs/*.h5 | wc -l)" = 40
check "every result file is valid, every kill was retried" $PY - out <<'PY'
import glob, json, sys, h5py
d = sys.argv[1]
for f in glob.glob(d + "/runs/*"):
    assert f.endswith(".h5"), f"left-over file {f}"
    with h5py.File(f) as h:
        assert h.attrs["status"] == "complete", f
ev = [json.loads(l) for l in open(d + "/events.jsonl")]
retried = [e for e in ev if e["event"] == "retried"]
assert retried and all("SIGKILL" in e["reason"] for e in retried), retried
fin = [e for e in ev if e["event"] == "finished"]
assert len(fin) == 40 and len({e["cell_id"] for e in fin}) == 40
print(f"ok: {len(retried)} attempts killed and retried, 40 cells complete once each")
PY
