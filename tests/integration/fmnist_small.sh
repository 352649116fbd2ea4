# The CI-sized paper A Fashion-MNIST grids through `attnsweep run` (2 workers) and
# `attnsweep aggregate`: paperA_fmnist_small (its six activations) and
# paperA_scale_sweep_small (numeric scales). Checks that every cell completes with its
# metrics and per-layer/head norm trajectories and that the aggregate keeps the
# activations apart and numeric scales numeric; not the accuracy (20 steps).
source "$(dirname "$0")/lib.bash"
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || [ -n "${ATTNSWEEP_FASHION_MNIST_DIR:-}" ] || {
  echo "skip: Fashion-MNIST (Debian package dataset-fashion-mnist) is not installed"; exit 77; }

for grid in paperA_fmnist_small:6 paperA_scale_sweep_small:4; do
  name=${grid%%:*} n=${grid##*:}
  run_rc "$ATTNSWEEP" run "$SRC/experiments/grids/$name.json" --out "$name" --workers 2
  check "$name: run exits 0 (got $RC: $ERR)" test "$RC" = 0
  check "$name: $n result files" test "$(ls "$name"/runs/*.h5 | wc -l)" = "$n"
  run_rc "$ATTNSWEEP" aggregate "$name"
  check "$name: aggregate exits 0 (got $RC: $ERR)" test "$RC" = 0
done

check "paperA_fmnist_small: six activations, with metrics and norm trajectories" $PY - paperA_fmnist_small <<'PY'
import csv, glob, json, sys
import h5py, numpy as np
d = sys.argv[1]
for path in glob.glob(f"{d}/runs/*.h5"):
    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["config"])
        fin = dict(f["final"].attrs)
        assert f.attrs["status"] == "complete", path
        assert 0 <= fin["test_accuracy"] <= 1 and np.isfinite(fin["test_loss"]), fin
        steps = f["train/step"][()]
        # log_every 5 over 20 steps: 0, 5, 10, 15 and the last step
        assert list(steps) == [0, 5, 10, 15, 19], steps
        for n in ["attn_fro", "jac_fro"]:
            a = f[f"norms/{n}"][()]
            assert a.shape == (len(steps), cfg["layers"], cfg["heads"]), (n, a.shape)
            assert np.all(np.isfinite(a)) and np.all(a > 0), (path, n)
        # Theorem 4.1 (any input): ||softmax(S)||_F <= sqrt(N), ||J||_F <= sqrt(N)/2 per head
        if cfg["activation"] == "softmax":
            N = cfg["prompt_length"]
            assert np.all(f["norms/attn_fro"][()] <= np.sqrt(N) * (1 + 1e-5))
            assert np.all(f["norms/jac_fro"][()] <= np.sqrt(N) / 2 * (1 + 1e-5))
with h5py.File(f"{d}/aggregate.h5", "r") as f:
    c = f["cells"]
    kinds = sorted(zip([a.decode() for a in c["activation"][()]], [int(x) if np.isfinite(x) else 0 for x in c["degree"][()]],
                       [s.decode() for s in c["scale"][()]]))
    # softmax and sigmoid take no scale: "none" among named scales (summary.csv groups by it)
    assert kinds == sorted([("softmax", 0, "none"), ("poly", 3, "inv_sqrt_n"), ("poly", 3, "none"), ("poly", 1, "inv_sqrt_n"),
                            ("relu", 0, "inv_n"), ("sigmoid", 0, "none")]), kinds
    assert f["trajectories/norms_attn_fro"].shape == (6, 5, 2, 2), f["trajectories/norms_attn_fro"].shape
    assert f["trajectories/norms_jac_fro"].shape == (6, 5, 2, 2)
rows = list(csv.DictReader(open(f"{d}/summary.csv")))
assert len(rows) == 6 and all(r["test_accuracy"] and r["status"] == "complete" for r in rows), rows
print("fmnist:", [(r["activation"], r["degree"], r["scale"], r["test_accuracy"]) for r in rows])
PY

check "paperA_scale_sweep_small: numeric scales are distinct cells and a numeric column" $PY - paperA_scale_sweep_small <<'PY'
import csv, sys
import h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/aggregate.h5", "r") as f:
    c = f["cells"]
    assert c["scale"].dtype.kind == "f", c["scale"].dtype
    got = sorted(zip(c["scale"][()].tolist(), c["prompt_length"][()].tolist()))
    assert got == [(0.125, 16), (0.125, 49), (0.5, 16), (0.5, 49)], got
    assert np.all(np.isfinite(c["test_accuracy"][()]))
rows = list(csv.DictReader(open(f"{d}/summary.csv")))
assert sorted(float(r["scale"]) for r in rows) == [0.125, 0.125, 0.5, 0.5], rows
# The best scale per N (results/best_scale.h): with two scales and one seed it is the
# scale of the better test accuracy, exactly, at the grid's edge; one fit over N 16, 49.
acc = {(float(r["scale"]), int(r["prompt_length"])): float(r["test_accuracy"]) for r in rows}
best = [r for r in csv.DictReader(open(f"{d}/best_scale.csv")) if r["metric"] == "test_accuracy"]
assert [int(float(r["prompt_length"])) for r in best] == [16, 49], best
for r in best:
    n = int(float(r["prompt_length"]))
    want = max((0.125, 0.5), key=lambda c: acc[(c, n)])
    assert float(r["c_star"]) == want and r["at_edge"] == "1" and r["scales"] == "2" and r["seeds"] == "1", (r, acc)
with h5py.File(f"{d}/aggregate.h5", "r") as f:
    assert f["best_scale_fit/points"][()].tolist() == [2, 2], f["best_scale_fit/points"][()]  # accuracy and loss
print("best scale:", [(r["prompt_length"], r["c_star"]) for r in best])
PY
run_rc "$ATTNSWEEP" report paperA_scale_sweep_small
check "scale sweep report: exits 0 (got $RC: $ERR)" test "$RC" = 0
check "scale sweep report draws the best scale" grep -q "Best scale against prompt length" paperA_scale_sweep_small/report.html

# 5e-1 and 0.50 are one canonical number: the same cell id as the grid's 0.5.
cat > same.json <<'JSON'
{"name": "same", "axes": {"task": ["image"], "activation": ["poly"], "scale": [5e-1, 0.50, 0.125], "prompt_length": [16, 49], "seed": [0]},
 "fixed": {"degree": 3, "dim": 32, "layers": 2, "heads": 2, "mlp_ratio": 2, "steps": 20, "batch": 32, "lr": 2e-3,
           "warmup_steps": 5, "log_every": 5, "eval_every": 10, "eval_batches": 2}}
JSON
run_rc "$ATTNSWEEP" plan same.json
check "plan: 5e-1 and 0.50 are one scale (got: $OUT)" grep -q "^4 cells" <<<"$(tail -1 <<<"$OUT")"
check "plan: the same cell ids as paperA_scale_sweep_small" test \
  "$(grep -E '^[0-9a-f]{16}( |$)' <<<"$OUT" | cut -d' ' -f1 | sort)" = "$(ls paperA_scale_sweep_small/runs | sed 's/\.h5$//' | sort)"
