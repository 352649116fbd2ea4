# Cells of different sizes in one sweep: `devices: 2` cells (data-parallel over two CPU
# devices) take two slots of one rank, `devices: 1` cells one; a mixed sweep on 3 slots
# completes, alone and under mpirun; a cell that needs more devices than a rank has
# slots is refused up front instead of waiting for ever.
source "$(dirname "$0")/lib.bash"
cat > mixed.json <<'JSON'
{"name": "mixed-devices",
 "axes": {"task": ["image"], "devices": [1, 2], "seed": [0, 1]},
 "fixed": {"activation": "poly", "degree": 3, "scale": "inv_sqrt_n", "prompt_length": 16, "layers": 1, "heads": 2,
           "dim": 16, "steps": 60, "batch": 16, "log_every": 10, "eval_every": 60},
 "include": [{"task": "synthetic", "seed": 5, "seconds": 0.5}, {"task": "synthetic", "seed": 6, "seconds": 0.5}]}
JSON
check_sweep() {  # check_sweep DIR
  $PY - "$1" <<'PY'
import json, sys
d = sys.argv[1]
ev = [json.loads(l) for l in open(d + "/events.jsonl")]
cells = {e["cell_id"]: json.load(open(f"{d}/cells/{e['cell_id']}.json")) for e in ev if e["event"] == "started"}
for e in ev:
    if e["event"] == "started":
        assert e["slots"] == cells[e["cell_id"]].get("devices", 1), e
fin = [e for e in ev if e["event"] == "finished"]
assert len(fin) == 6 and all(e["status"] == "complete" for e in fin), fin
print("ok: 6 cells complete; devices=2 cells started on 2 slots, the rest on 1")
PY
}
run_rc "$ATTNSWEEP" run mixed.json --out local --workers 3
check "mixed sweep on 3 local slots exits 0 ($ERR)" test "$RC" = 0
check_sweep local
run_rc mpirun -np 2 "$ATTNSWEEP" run mixed.json --out mpi --workers 2
check "mixed sweep under mpirun -np 2 (2 slots each) exits 0" test "$RC" = 0
check_sweep mpi
# devices = 2 trains like devices = 1 on the same global batch (float tolerance).
check "devices=2 matches devices=1 on the same global batch" $PY - local <<'PY'
import glob, json, sys, h5py, numpy as np
d = sys.argv[1]
by = {}
for f in glob.glob(d + "/runs/*.h5"):
    with h5py.File(f) as h:
        c = json.loads(h.attrs["config"])
        if c["task"] == "image":
            by[(c["seed"], c["devices"])] = h["train/loss"][()]
for seed in (0, 1):
    a, b = by[(seed, 1)], by[(seed, 2)]
    err = np.max(np.abs(a - b) / np.abs(a))
    print(f"seed {seed}: max relative loss difference over {len(a)} logged steps {err:.2e}")
    assert err < 1e-4, err
PY
cat > too_big.json <<'JSON'
{"name": "too-big", "axes": {"task": ["image"], "devices": [4]},
 "fixed": {"prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 10, "batch": 16}}
JSON
run_rc "$ATTNSWEEP" run too_big.json --out big --workers 3
check "a cell needing 4 devices on 3 slots is refused with exit 2" test "$RC" = 2
check "naming the problem ($ERR)" grep -q "devices = 4, more than the 3 worker slots" <<<"$ERR"
check "and nothing was written" test ! -e big
