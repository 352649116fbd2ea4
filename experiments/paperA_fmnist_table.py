#!/usr/bin/python3
"""The paper A Fashion-MNIST tables of docs/results-paperA.md from an aggregated sweep.

usage: /usr/bin/python3 experiments/paperA_fmnist_table.py DIR [--n 49]
DIR is an `attnsweep run` + `attnsweep aggregate` directory of paperA_fmnist (or its
_n49 slice). Prints, per activation at prompt length N: test accuracy mean ± sample std
over the seeds, the seeds' values, wall seconds per cell, and the attention norms
‖φ(S)‖_F and ‖∂φ(S)/∂S‖_F of the first and last layer (mean over heads, then over
seeds) at initialisation (step 0), their maximum over training, and at the last step.
"""
import argparse

import h5py
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--n", type=int, default=49)
args = ap.parse_args()

with h5py.File(f"{args.dir}/aggregate.h5", "r") as f:
    c = {k: f["cells"][k][()] for k in f["cells"]}
    tr = {k: f["trajectories"][k][()] for k in ("norms_attn_fro", "norms_jac_fro")}
dec = lambda a: np.array([x.decode() if isinstance(x, bytes) else str(x) for x in a])
n = len(c["cell_id"])
act, status = dec(c["activation"]), dec(c["status"])
scale = dec(c["scale"]) if "scale" in c else np.array([""] * n)  # absent when no cell has one
deg = c["degree"] if "degree" in c else np.full(n, np.nan)

def label(i):
    a = act[i]
    if a == "poly":
        s = {"none": "", "inv_sqrt_n": "/√N", "inv_n": "/N"}.get(scale[i], f"·{scale[i]}")
        return f"poly{int(deg[i])}{s}" + (" (unscaled)" if scale[i] == "none" else "")
    if a == "relu":
        return "relu" + {"none": "", "inv_sqrt_n": "/√N", "inv_n": "/N"}.get(scale[i], f"·{scale[i]}")
    return a

order = ["softmax", "poly3/√N", "poly3 (unscaled)", "poly1/√N", "relu/N", "sigmoid"]
groups = {}
for i in np.flatnonzero(c["prompt_length"] == args.n):
    groups.setdefault(label(i), []).append(i)
keys = [k for k in order if k in groups] + sorted(k for k in groups if k not in order)

def last_row(t):  # [T, L, H] NaN-padded -> the last logged row
    ok = np.flatnonzero(np.isfinite(t).all(axis=(1, 2)))
    return t[ok[-1]]

print(f"N = {args.n}: test accuracy, mean ± std over seeds (seed order), wall s per cell")
print("| activation | test accuracy | seeds | status | wall s per cell |")
print("|---|---|---|---|---|")
for k in keys:
    idx = sorted(groups[k], key=lambda i: c["seed"][i])
    acc = c["test_accuracy"][idx]
    std = np.std(acc, ddof=1) if len(acc) > 1 else float("nan")
    st = ", ".join(sorted(set(status[idx])))
    w = c["wall_seconds"][idx]
    print(f"| {k} | {100 * acc.mean():.1f} ± {100 * std:.1f} % | {', '.join(f'{100 * a:.1f}' for a in acc)} "
          f"| {st} | {w.min():.0f}–{w.max():.0f} (mean {w.mean():.0f}) |")

L = tr["norms_attn_fro"].shape[2]
print(f"\nN = {args.n}: norms of layers 1 and {L}, mean over heads and seeds: step 0 → max over training → last step")
print(f"| activation | attn_fro layer 1 | attn_fro layer {L} | jac_fro layer 1 | jac_fro layer {L} |")
print("|---|---|---|---|---|")
for k in keys:
    cols = []
    for name in ("norms_attn_fro", "norms_jac_fro"):
        for layer in (0, L - 1):
            t = tr[name][groups[k], :, layer, :].mean(axis=-1)  # [seeds, T]
            init = np.nanmean(t[:, 0])
            peak = np.nanmean(np.nanmax(t, axis=1))
            end = np.mean([last_row(tr[name][i])[layer].mean() for i in groups[k]])
            cols.append(f"{init:.3g} → {peak:.3g} → {end:.3g}")
    print(f"| {k} | " + " | ".join(cols) + " |")

# Across N (when the directory holds more than one N): accuracy paired by seed against
# softmax, and how the late-training plateau of ‖φ(S)‖_F grows with N.
ns = sorted(set(int(x) for x in c["prompt_length"]))
if len(ns) > 1:
    T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
            9: 2.262, 10: 2.228, 13: 2.160, 16: 2.120, 25: 2.060}  # Student t, 97.5 %
    by = {}  # (label, N) -> {seed: cell index}
    for i in range(n):
        by.setdefault((label(i), int(c["prompt_length"][i])), {})[int(c["seed"][i])] = i
    labels = [k for k in order if any((k, m) in by for m in ns)]
    print("\nTest accuracy minus softmax's, paired by seed: mean [95 % interval] in points;"
          " '≤1sd' when |mean| is within softmax's seed std at that N")
    print("| activation | " + " | ".join(f"N = {m}" for m in ns) + " |")
    print("|---|" + "---|" * len(ns))
    for k in labels[1:]:
        row = []
        for m in ns:
            a, s = by.get((k, m), {}), by.get(("softmax", m), {})
            seeds = sorted(set(a) & set(s))
            d = 100 * np.array([c["test_accuracy"][a[x]] - c["test_accuracy"][s[x]] for x in seeds])
            sm = 100 * np.array([c["test_accuracy"][s[x]] for x in seeds])
            hw = T975[len(d) - 1] * d.std(ddof=1) / np.sqrt(len(d))
            near = " ≤1sd" if abs(d.mean()) <= sm.std(ddof=1) else ""
            row.append(f"{d.mean():+.2f} [{d.mean() - hw:+.2f}, {d.mean() + hw:+.2f}]{near}")
        print(f"| {k} | " + " | ".join(row) + " |")

    with h5py.File(f"{args.dir}/aggregate.h5", "r") as f:
        tstep = f["trajectories"]["train_step"][()]
    print("\nPlateau of ‖φ(S)‖_F (mean over heads and over the logged steps in the last quarter of"
          " training), per layer: value at each N (mean over seeds), and the slope of log plateau on"
          " log N over every cell, ± its 95 % interval")
    print("| activation | layer | " + " | ".join(f"N = {m}" for m in ns) + " | slope |")
    print("|---|---|" + "---|" * len(ns) + "---|")
    for k in labels:
        for layer in range(L):
            xs, ys, means = [], [], []
            for m in ns:
                vals = []
                for i in by.get((k, m), {}).values():
                    st = tstep[i]
                    late = np.isfinite(st) & (st >= 0.75 * np.nanmax(st))
                    v = tr["norms_attn_fro"][i][late, layer, :].mean()
                    vals.append(v)
                    xs.append(np.log(m))
                    ys.append(np.log(v))
                means.append(np.mean(vals))
            x, y = np.array(xs), np.array(ys)
            A = np.vstack([x, np.ones_like(x)]).T
            coef, res, *_ = np.linalg.lstsq(A, y, rcond=None)
            dof = len(x) - 2
            se = np.sqrt(np.sum((y - A @ coef) ** 2) / dof / np.sum((x - x.mean()) ** 2))
            print(f"| {k} | {layer + 1} | " + " | ".join(f"{v:.3g}" for v in means) +
                  f" | {coef[0]:.2f} ± {T975.get(dof, 2.0) * se:.2f} |")
