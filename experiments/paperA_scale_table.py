#!/usr/bin/python3
"""The paper A scale-sweep tables of docs/results-paperA.md from aggregated sweeps.

usage: /usr/bin/python3 experiments/paperA_scale_table.py SWEEP_DIR [--fmnist FMNIST_DIR]
SWEEP_DIR is an `attnsweep run` + `attnsweep aggregate` directory of paperA_scale_sweep
(c·s³ with numeric c); FMNIST_DIR, of paperA_fmnist, adds its cubic cells as c = 1
(unscaled) and c = 1/√N: the same model, training, init_seed and batch order (seed), so
cells of one seed pair across the two grids. Prints test accuracy per c and N (mean ±
sample std over seeds), paired differences with 95 % t intervals, and aggregate's
best_scale.csv (c*(N) with its bootstrap interval).
"""
import argparse
import csv

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--fmnist", default=None)
args = ap.parse_args()

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}  # Student t, 97.5 %
INV_SQRT_N = -1.0  # stands for c = 1/√N in the tables' keys


def rows(path):
    with open(f"{path}/summary.csv") as f:
        return list(csv.DictReader(f))


acc = {}  # (N, c) -> {seed: accuracy in points}
for r in rows(args.dir):
    if r["status"] == "complete":
        acc.setdefault((int(r["prompt_length"]), float(r["scale"])), {})[int(r["seed"])] = 100 * float(r["test_accuracy"])
if args.fmnist:
    for r in rows(args.fmnist):
        if r["activation"] == "poly" and r["degree"] in ("3", "3.0") and r["status"] == "complete":
            c = {"none": 1.0, "inv_sqrt_n": INV_SQRT_N}.get(r["scale"])
            if c is not None:
                acc.setdefault((int(r["prompt_length"]), c), {})[int(r["seed"])] = 100 * float(r["test_accuracy"])

ns = sorted({n for n, _ in acc})
cs = sorted({c for _, c in acc if c > 0})
name = lambda c: "1/√N" if c == INV_SQRT_N else ("1" if c == 1 else f"1/{round(1 / c)}")
cols = cs + ([INV_SQRT_N] if any(c == INV_SQRT_N for _, c in acc) else [])

print("Test accuracy (%), mean ± std over seeds, per scale c of c·s³")
print("| N | " + " | ".join(f"c = {name(c)}" for c in cols) + " |")
print("|---|" + "---|" * len(cols))
for n in ns:
    cells = []
    for c in cols:
        v = np.array(list(acc.get((n, c), {}).values()))
        cells.append(f"{v.mean():.2f} ± {v.std(ddof=1):.2f}" if len(v) > 1 else "—")
    print(f"| {n} | " + " | ".join(cells) + " |")


def paired(n, a, b):
    x, y = acc.get((n, a), {}), acc.get((n, b), {})
    seeds = sorted(set(x) & set(y))
    d = np.array([x[s] - y[s] for s in seeds])
    if len(d) < 2:
        return "—"
    hw = T975[len(d) - 1] * d.std(ddof=1) / np.sqrt(len(d))
    return f"{d.mean():+.2f} [{d.mean() - hw:+.2f}, {d.mean() + hw:+.2f}]"


pairs = [(min(cs), max(c for c in cs if c < 1)), (min(cs), 1.0), (max(c for c in cs if c < 1), 1.0),
         (INV_SQRT_N, 1.0)]
pairs = [(a, b) for a, b in pairs if any((n, a) in acc and (n, b) in acc for n in ns)]
print("\nPaired by seed: accuracy difference in points, mean [95 % interval]")
print("| difference | " + " | ".join(f"N = {n}" for n in ns) + " |")
print("|---|" + "---|" * len(ns))
for a, b in pairs:
    print(f"| c = {name(a)} − c = {name(b)} | " + " | ".join(paired(n, a, b) for n in ns) + " |")

with open(f"{args.dir}/best_scale.csv") as f:
    best = [r for r in csv.DictReader(f)]
print("\nBest scale c*(N) (aggregate's best_scale.csv: parabola vertex in log c; 95 % bootstrap over seeds)")
print("| metric | N | c* | interval | at the grid's edge |")
print("|---|---|---|---|---|")
for r in best:
    print(f"| {r['metric']} | {r['prompt_length']} | {float(r['c_star']):.3f} | "
          f"[{float(r['c_lo']):.3f}, {float(r['c_hi']):.3f}] | {'yes' if r['at_edge'] == '1' else 'no'} |")

# The slope of log c* on log N with its bootstrap interval: aggregate.h5's /best_scale_fit.
import h5py  # noqa: E402  (only this part needs it)

with h5py.File(f"{args.dir}/aggregate.h5", "r") as f:
    fit = {k: f["best_scale_fit"][k][()] for k in f["best_scale_fit"]}
print("\n| metric | slope of log c* on log N | 95 % bootstrap | paper A (1/√N) |")
print("|---|---|---|---|")
for i in range(len(fit["slope"])):
    m = fit["metric"][i]
    m = m.decode() if isinstance(m, bytes) else str(m)
    print(f"| {m} | {fit['slope'][i]:+.2f} | [{fit['slope_lo'][i]:+.2f}, {fit['slope_hi'][i]:+.2f}] | −0.50 |")
