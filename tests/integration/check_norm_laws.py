"""Checks the norm laws of paper A on an aggregate of the norm-probe grid (issue 2):
log-log slopes of attn_fro over N = 64..1024 (the aggregate must be made with
--fit-min-n 64): unscaled poly 1.0 +- 0.1, inv_sqrt_n 0.5 +- 0.1, inv_n 0.0 +- 0.1,
softmax below 0.15; and no softmax sample above sqrt(N) (attn) or sqrt(N)/2 (jac)."""
import sys

import h5py
import numpy as np

path = sys.argv[1]
with h5py.File(path, "r") as f:
    fits = {k: f["fits"][k][()] for k in f["fits"]}
    cells = {k: f["cells"][k][()] for k in f["cells"]}


def text(a):
    return [x.decode() if isinstance(x, bytes) else str(x) for x in a]


metric, group = text(fits["metric"]), text(fits["group"])
slopes = dict(((m, g), s) for m, g, s in zip(metric, group, fits["slope"]))
n_min = dict(((m, g), s) for m, g, s in zip(metric, group, fits["n_min"]))
failures = []
checked = 0
for (m, g), s in slopes.items():
    if m != "attn_fro":
        continue
    assert n_min[(m, g)] == 64, f"fit of {g} starts at N={n_min[(m, g)]}, expected 64 (use --fit-min-n 64)"
    want = None
    if "activation=poly" in g:
        want = {"scale=none": 1.0, "scale=inv_sqrt_n": 0.5, "scale=inv_n": 0.0}[next(p for p in g.split() if p.startswith("scale="))]
        ok = abs(s - want) <= 0.1
    elif "activation=softmax" in g:
        ok = s < 0.15
    else:
        continue
    checked += 1
    print(f"{'ok  ' if ok else 'FAIL'} attn_fro slope {s:+.3f} for {g}" + (f" (want {want} +- 0.1)" if want is not None else " (want < 0.15)"))
    if not ok:
        failures.append(g)
assert checked == 10, f"expected 10 poly/softmax groups, found {checked}"

act = text(cells["activation"])
n = cells["prompt_length"].astype(float)
soft = np.array([a == "softmax" for a in act])
attn_max, jac_max = cells["attn_fro_max"][soft], cells["jac_fro_max"][soft]
bound_ok = np.all(attn_max <= np.sqrt(n[soft]) * (1 + 1e-6)) and np.all(jac_max <= np.sqrt(n[soft]) / 2 * (1 + 1e-6))
print(f"{'ok  ' if bound_ok else 'FAIL'} softmax samples within sqrt(N) and sqrt(N)/2: "
      f"max attn/sqrt(N) = {np.max(attn_max / np.sqrt(n[soft])):.4f}, max jac/(sqrt(N)/2) = {np.max(jac_max / (np.sqrt(n[soft]) / 2)):.4f}")
if failures or not bound_ok:
    sys.exit(1)
