# kill -9 the whole run (one-process mode, then mpirun) at random moments, then rerun:
# only unfinished cells run, no file under runs/ is invalid, and a training cell that
# was checkpointed resumes (its children are told to stop when their run dies).
source "$(dirname "$0")/../integration/lib.bash"
cat > grid.json <<'JSON'
{"name": "kill-run",
 "axes": {"task": ["synthetic"], "seed": [0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19]},
 "fixed": {"seconds": 0.7},
 "include": [{"task": "image", "prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 48000, "batch": 16,
              "log_every": 100, "eval_every": 3000, "checkpoint_every": 500, "seed": 0}]}
JSON
validate() {  # every file under runs/ is a valid, complete result
  $PY - "$1" <<'PY'
import glob, sys, h5py
for f in glob.glob(sys.argv[1] + "/runs/*"):
    assert f.endswith(".h5") or f.endswith(".h5.invalid"), f"unexpected file {f}"
    if f.endswith(".h5"):
        with h5py.File(f) as h:
            assert h.attrs["status"] == "complete", f
PY
}
for round in 1 2 3; do
  if [ $round = 2 ]; then
    mpirun -np 2 "$ATTNSWEEP" run grid.json --out out --workers 1 >/dev/null 2>&1 &
  else
    "$ATTNSWEEP" run grid.json --out out --workers 2 >/dev/null 2>&1 &
  fi
  pid=$!
  sleep "$($PY -c "import random; print(round(random.uniform(3.0, 5.0), 2))")"
  kill -9 $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  sleep 1  # orphaned children get SIGTERM (PDEATHSIG) and leave
  check "round $round: no attnsweep train child outlives its run" test -z "$(pgrep -f "$ATTNSWEEP train" || true)"
  check "round $round: every file under runs/ is valid" validate out
  echo "round $round: $(ls out/runs/*.h5 2>/dev/null | wc -l) of 21 cells done"
done
before=$(ls out/runs/*.h5 | wc -l)
train_id=$(basename "$(grep -l '"task": "image"' out/cells/*.json)" .json)
run_rc "$ATTNSWEEP" run grid.json --out out --workers 2
check "the final run exits 0" test "$RC" = 0
check "21 result files" test "$(ls out/runs/*.h5 | wc -l)" = 21
check "the final run started only the $((21 - before)) unfinished cells" test "$(count_events out started)" = $((21 - before))
check "the training cell resumed from a checkpoint at least once" grep -q "resuming from" out/logs/$train_id.log
validate out
