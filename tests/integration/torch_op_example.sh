# The own-code ViT example with attnsweep's attention as a PyTorch op
# (examples/own_code/vit_fmnist_op.json, docs/pytorch.md), made tiny for CI: its cells
# (softmax and s^3/sqrt(N), 3 seeds) import the op from the PYTHONPATH attnsweep sets,
# train to the end, and their per-layer norms are in the results as metrics at every
# logged step (softmax's within its bounds [1, sqrt(N)]; the op's values themselves are
# checked in torch_op.py).
source "$(dirname "$0")/lib.bash"
: "${BUILD:?set by ctest: the build directory}"
if [ ! -f "$BUILD/python/attnsweep_torch/libattnsweep_torch.so" ]; then
  [ -f /usr/include/torch/library.h ] && fail "libtorch-dev is installed but the PyTorch op was not built"
  echo "SKIPPED: no libtorch-dev: the PyTorch op is not built"; exit 77
fi
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "no Fashion-MNIST (Debian: dataset-fashion-mnist)"
export TMPDIR=$WORK/tmp && mkdir -p "$TMPDIR"
$PY - "$SRC/examples/own_code/vit_fmnist_op.json" "$SRC" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["command"]["argv"][1] = sys.argv[2] + "/" + g["command"]["argv"][1]
g["fixed"].update({"steps": 20, "batch": 16, "n_train": 512, "n_test": 256, "dim": 16, "heads": 2, "layers": 2,
                   "log_every": 5})
json.dump(g, open("op.json", "w"), indent=1)
PY
run_rc "$ATTNSWEEP" run op.json --out out --workers 2 --threads 1 --retries 0
check "the example grid with the op completes (rc $RC: $ERR)" test "$RC" = 0
check "6 result files" test "$(ls out/runs/*.h5 | wc -l)" = 6
results_valid out
run_rc "$ATTNSWEEP" aggregate out
check "aggregate exits 0 (rc $RC: $ERR)" test "$RC" = 0
check "each cell logged the op's norms per layer at its logged steps" $PY - out <<'PY'
import glob, json, sys, h5py, numpy as np
for f in glob.glob(sys.argv[1] + "/runs/*.h5"):
    with h5py.File(f) as h:
        steps = h["train/step"][()]
        assert list(steps) == [0, 5, 10, 15, 19], (f, steps)
        act = json.loads(h.attrs["config"])["activation"]
        for layer in (0, 1):
            a = h[f"train/layer{layer}/attn_fro"][()]
            j = h[f"train/layer{layer}/jac_fro"][()]
            assert a.shape == steps.shape and np.isfinite(a).all() and (a > 0).all(), (f, a)
            assert np.isfinite(j).all() and (j > 0).all(), (f, j)
            # softmax rows sum to 1, so ||P||_F of N = 16 rows is within [1, sqrt(N)] = [1, 4]
            # (1: uniform rows, 4: one-hot); s^3/sqrt(N) has no such bound.
            if act == "softmax":
                assert ((a >= 1 - 1e-6) & (a <= 4 + 1e-6)).all(), (f, a)
PY
