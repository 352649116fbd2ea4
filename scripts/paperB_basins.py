#!/usr/bin/python3
"""Paper B's paired training analysis from a run directory of paperB_icl_paired*.json
(after `attnsweep aggregate DIR`): the paired softmax - linear gap of test MSE per L
(aggregate's paired.csv), the same gap on the mean of the last five evaluations (less
sensitive to a late spike), the distribution over initialisations, and which basin each
initialisation falls into, per activation and L. Prints Markdown tables
(docs/results-paperB.md quotes them).

usage: scripts/paperB_basins.py DIR

Basins: at each (activation, L) the cells' log test MSE is split in two by the threshold
that minimises the within-group sum of squares (1-D two-means, exact); an
initialisation's basin there is the majority over its data seeds. The paired gap is also
given within each basin, the basin of a pair being its linear cell's (the activation
whose basins are the same at every L).
"""
import csv
import sys
from collections import defaultdict

import h5py
import numpy as np

d = sys.argv[1]
cells = list(csv.DictReader(open(f"{d}/summary.csv")))
paired = [r for r in csv.DictReader(open(f"{d}/paired.csv")) if r["metric"] == "test_mse"]
name = {"softmax": "softmax", "poly": "linear"}

with h5py.File(f"{d}/aggregate.h5", "r") as f:
    ids = list(f["cells/cell_id"].asstr()[()])
    ev = f["trajectories/eval_loss"][()]  # test MSE at each evaluation, NaN-padded
last5 = {}
for i, cid in enumerate(ids):
    v = ev[i][np.isfinite(ev[i])]
    last5[cid] = float(v[-5:].mean()) if len(v) else float("nan")

Ls = sorted({int(c["prompt_length"]) for c in cells})
by = defaultdict(dict)  # (act, L) -> (init, seed) -> (mse, last5)
for c in cells:
    if c["status"] != "complete":
        continue
    by[(c["activation"], int(c["prompt_length"]))][(int(c["init_seed"]), int(c["seed"]))] = (
        float(c["test_mse"]), last5[c["cell_id"]])

print("| L | pairs | softmax test MSE | linear test MSE | paired gap softmax − linear (95 % CI) | softmax lower in | gap on the mean of the last 5 evaluations (95 % CI) |")
print("|---|---|---|---|---|---|---|")
from math import sqrt
from scipy.stats import t as student_t  # Debian: python3-scipy


def tq(dof):
    return student_t.ppf(0.975, dof)


for L in Ls:
    r = next((r for r in paired if int(float(r["prompt_length"])) == L), None)
    s, p = by[("softmax", L)], by[("poly", L)]
    keys = sorted(set(s) & set(p))
    g5 = np.array([s[k][1] - p[k][1] for k in keys])
    sm = np.array([s[k][0] for k in keys])
    lm = np.array([p[k][0] for k in keys])
    ci5 = tq(len(g5) - 1) * g5.std(ddof=1) / sqrt(len(g5)) if len(g5) > 1 else float("nan")
    print(f"| {L} | {r['pairs'] if r else 0} | {sm.mean():.3f} ± {sm.std(ddof=1):.3f} | {lm.mean():.3f} ± {lm.std(ddof=1):.3f} | "
          f"{float(r['mean_diff']):+.3f} ± {float(r['ci95']):.3f} | {r['a_lower']}/{r['pairs']} | {g5.mean():+.3f} ± {ci5:.3f} |")

print()
print("Basin of each initialisation (L = low, H = high; majority over the 3 data seeds; two-means split of log test MSE at each activation and L):")
print()
inits = sorted({k[0] for v in by.values() for k in v})
head = "| init_seed | " + " | ".join(f"{name[a]} L={L}" for a in ("softmax", "poly") for L in Ls) + " |"
print(head)
print("|" + "---|" * (1 + 2 * len(Ls)))
def split(values):
    """Threshold between the two groups of log values with the least within-group sum of squares."""
    v = np.sort(np.log(values))
    best, cut = None, np.inf
    for k in range(1, len(v)):
        a, b = v[:k], v[k:]
        ss = ((a - a.mean()) ** 2).sum() + ((b - b.mean()) ** 2).sum()
        if best is None or ss < best:
            best, cut = ss, float(np.exp((v[k - 1] + v[k]) / 2))
    return cut


basin, low_cell = {}, {}
for a in ("softmax", "poly"):
    for L in Ls:
        v = by[(a, L)]
        cut = split([m for m, _ in v.values()])
        for k, (m, _) in v.items():
            low_cell[(a, L) + k] = m <= cut
        for i in inits:
            votes = [low_cell[(a, L, i, s)] for s in range(3) if (i, s) in v]
            basin[(a, L, i)] = ("L" if sum(votes) * 2 > len(votes) else "H") + ("" if all(x == votes[0] for x in votes) else "*")
for i in inits:
    print(f"| {i} | " + " | ".join(basin[(a, L, i)] for a in ("softmax", "poly") for L in Ls) + " |")
print()
print("(* = the data seeds disagree)")
for a in ("softmax", "poly"):
    frac = [sum(basin[(a, L, i)].startswith("L") for i in inits) for L in Ls]
    print(f"- {name[a]}: initialisations in the low basin at L = {', '.join(map(str, Ls))}: {', '.join(f'{k}/{len(inits)}' for k in frac)}")
same_act = sum(basin[("softmax", L, i)][0] == basin[("poly", L, i)][0] for L in Ls for i in inits)
print(f"- softmax and linear in the same basin for the same initialisation: {same_act}/{len(Ls) * len(inits)} (initialisation, L) points")
for a in ("softmax", "poly"):
    stable = sum(len({basin[(a, L, i)][0] for L in Ls}) == 1 for i in inits)
    print(f"- {name[a]}: initialisations in the same basin at every L: {stable}/{len(inits)}")

print()
print("Paired gap softmax − linear within each basin (the pair's basin = its linear cell's):")
print()
print("| L | low basin: pairs | gap (95 % CI) | high basin: pairs | gap (95 % CI) |")
print("|---|---|---|---|---|")
for L in Ls:
    s_, p_ = by[("softmax", L)], by[("poly", L)]
    cells_ = []
    for which in (True, False):
        g = np.array([s_[k][0] - p_[k][0] for k in sorted(set(s_) & set(p_)) if low_cell[("poly", L) + k] == which])
        ci = tq(len(g) - 1) * g.std(ddof=1) / sqrt(len(g)) if len(g) > 1 else float("nan")
        cells_ += [str(len(g)), f"{g.mean():+.3f} ± {ci:.3f}" if len(g) else "–"]
    print(f"| {L} | " + " | ".join(cells_) + " |")
