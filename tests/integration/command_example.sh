# The own-code example (examples/own_code/: a small PyTorch ViT on Fashion-MNIST, softmax
# against ReLU/N attention) as command cells, made tiny for CI: the grid (2 activations x
# 2 learning rates x 2 seeds) completes on CPU slots and under mpirun -np 2 with the same
# metrics (one thread a cell in both: torch sums in another order on two); aggregate and
# report show its trajectories and the paired comparison; a SIGTERM mid-run makes it exit 75 with its checkpoint, and the rerun resumes from it to
# metrics equal to an uninterrupted run's.
source "$(dirname "$0")/lib.bash"
export TMPDIR=$WORK/tmp  # the cells' scratch directories: a killed attempt's stays here
mkdir -p "$TMPDIR"
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "no Fashion-MNIST (Debian: dataset-fashion-mnist)"
command -v mpirun >/dev/null || fail "mpirun not found (openmpi-bin)"
# The example grid, its program by absolute path, small: few steps, a tiny model, 512 images.
tiny() {  # tiny OUT.json STEPS [AXES-JSON]
  $PY - "$SRC/examples/own_code/vit_fmnist.json" "$SRC" "$@" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["command"]["argv"][1] = sys.argv[2] + "/" + g["command"]["argv"][1]
g["fixed"] = {"steps": int(sys.argv[4]), "batch": 16, "n_train": 512, "n_test": 256, "dim": 16, "heads": 2,
              "layers": 1, "log_every": 5}
if len(sys.argv) > 5:
    g["axes"] = json.loads(sys.argv[5])
json.dump(g, open(sys.argv[3], "w"), indent=1)
PY
}
tiny ci.json 20
run_rc "$ATTNSWEEP" run ci.json --out out --workers 2 --threads 1 --retries 0
check "the example grid completes on CPU slots (rc $RC: $ERR)" test "$RC" = 0
check "8 result files" test "$(ls out/runs/*.h5 | wc -l)" = 8
results_valid out
run_rc "$ATTNSWEEP" report out
check "report exits 0 (rc $RC: $ERR)" test "$RC" = 0
for title in "Paired comparison of activations" "Training loss"; do
  check "the report has the figure '$title'" grep -q "<h2>Figure [0-9]. $title</h2>" out/report.html
done
check "aggregate holds the trajectories and the paired comparison" $PY - out/aggregate.h5 <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    loss = f["trajectories/train_loss"][()]
    assert loss.shape == (8, 5) and np.isfinite(loss).all(), loss.shape  # steps 0, 5, 10, 15, 19
    p = {k: (f["paired"][k].asstr()[()] if f["paired"][k].dtype.kind == "O" else f["paired"][k][()]) for k in f["paired"]}
    sel = p["metric"] == "test_accuracy"
    assert sel.sum() == 2 and (p["pairs"][sel] == 2).all(), p  # one row per lr, 2 seeds each
    assert set(p["a"][sel]) == {"activation=softmax"} and set(p["b"][sel]) == {"activation=relu scale=inv_n"}, p
PY
check "the report names the program, not its whole command section (#52)" bash -c \
  "grep -q 'command=/usr/bin/python3 ' out/report.html && ! grep -q '&quot;argv&quot;' out/report.html"
check "captions say what the panels show: one loss panel for all cells, no N column in the table" bash -c \
  "grep -q 'one panel for all cells (they have no prompt length)' out/report.html && grep -q 'per group of cells (complete' out/report.html"
check "labels follow the registry's notation: relu(S)/N is ReLU/N (#52)" $PY - out/summary.csv <<'PY'
import csv, sys
labels = {r["activation"]: r["label"] for r in csv.DictReader(open(sys.argv[1]))}
assert labels == {"softmax": "softmax", "relu": "ReLU/N"}, labels
PY

run_rc mpirun -np 2 "$ATTNSWEEP" run ci.json --out mpi --workers 1 --threads 1 --retries 0
check "the example grid completes under mpirun -np 2 (rc $RC: $ERR)" test "$RC" = 0
check "with the same metrics as on local slots" $PY - out mpi <<'PY'
import glob, os, sys, h5py, numpy as np
a = sorted(glob.glob(sys.argv[1] + "/runs/*.h5"))
assert [os.path.basename(f) for f in a] == sorted(os.path.basename(f) for f in glob.glob(sys.argv[2] + "/runs/*.h5"))
for f in a:
    with h5py.File(f) as x, h5py.File(sys.argv[2] + "/runs/" + os.path.basename(f)) as y:
        for k in x["train"]:
            np.testing.assert_array_equal(x["train"][k][()], y["train"][k][()], err_msg=f + " " + k)
        assert dict(x["final"].attrs) == dict(y["final"].attrs), f
PY

# SIGTERM mid-run: exit 75 with a checkpoint, then a resume equal to an uninterrupted run.
one='{"task": ["command"], "activation": ["relu"], "lr": [0.003], "seed": [1]}'
tiny long.json 400 "$one"
run_rc "$ATTNSWEEP" run long.json --out whole --workers 1 --threads 1 --retries 0
check "the uninterrupted run completes (rc $RC: $ERR)" test "$RC" = 0
"$ATTNSWEEP" run long.json --out cut --workers 1 --threads 1 --retries 0 2>cut_err.txt &
pid=$!
for _ in $(seq 1200); do
  [ "$(cat cut/checkpoints/*.metrics.jsonl 2>/dev/null | wc -l)" -ge 3 ] && break
  sleep 0.05
done
check "the program logged steps before the signal" test "$(cat cut/checkpoints/*.metrics.jsonl | wc -l)" -ge 3
kill -TERM $pid
set +e; wait $pid; rc=$?; set -e
check "the interrupted run exits 75 (got $rc)" test "$rc" = 75
check "the program saved its checkpoint and exited 75" grep -q "stopped by a signal after step" cut/logs/*.log
check "its checkpoint is kept for the rerun" test -s "$(ls cut/checkpoints/*.ckpt)"
run_rc "$ATTNSWEEP" run long.json --out cut --workers 1 --threads 1 --retries 0
check "the rerun completes (rc $RC: $ERR)" test "$RC" = 0
check "it resumed from the checkpoint" grep -q "resumed from .* at step [1-9]" cut/logs/*.log
check "the resumed metrics equal the uninterrupted run's" $PY - whole cut <<'PY'
import glob, os, sys, h5py, numpy as np
(f,) = glob.glob(sys.argv[1] + "/runs/*.h5")
with h5py.File(f) as x, h5py.File(sys.argv[2] + "/runs/" + os.path.basename(f)) as y:
    assert sorted(x["train"]) == ["accuracy", "loss", "lr", "step"], list(x["train"])
    for k in x["train"]:
        np.testing.assert_array_equal(x["train"][k][()], y["train"][k][()], err_msg=k)
    assert dict(x["final"].attrs) == dict(y["final"].attrs), (dict(x["final"].attrs), dict(y["final"].attrs))
    print("   ", len(x["train/step"]), "logged steps and", dict(x["final"].attrs), "equal")
PY
