#!/usr/bin/python3
"""Paper B's paired training analysis from a run directory of paperB_icl_paired*.json
(after `attnsweep aggregate DIR`): the paired softmax - linear gap of test MSE per L
(the pairing of aggregate's paired.csv), the same gap on the mean of the last five evaluations (less
sensitive to a late spike), the distribution over initialisations, and which basin each
initialisation falls into, per activation and L. Prints Markdown tables
(docs/results-paperB.md quotes them).

usage: scripts/paperB_basins.py INPUT...

Each INPUT is a run directory after `attnsweep aggregate` (its summary.csv, and its
aggregate.h5 for the last evaluations) or a summary CSV on its own (no trajectories: its
cells have no last-five mean); cells are taken once by cell id, so the parts of one grid
run in several directories (or kept from an earlier machine as a CSV) combine.

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

cells, last5, seen = [], {}, set()
for d in sys.argv[1:]:
    rows = list(csv.DictReader(open(d if d.endswith(".csv") else f"{d}/summary.csv")))
    cells += [r for r in rows if r["cell_id"] not in seen]
    seen |= {r["cell_id"] for r in rows}
    if d.endswith(".csv"):
        continue
    with h5py.File(f"{d}/aggregate.h5", "r") as f:
        ids = list(f["cells/cell_id"].asstr()[()])
        ev = f["trajectories/eval_loss"][()]  # test MSE at each evaluation, NaN-padded
    for i, cid in enumerate(ids):
        v = ev[i][np.isfinite(ev[i])]
        last5.setdefault(cid, float(v[-5:].mean()) if len(v) else float("nan"))
name = {"softmax": "softmax", "poly": "linear"}

Ls = sorted({int(c["prompt_length"]) for c in cells})
by = defaultdict(dict)  # (act, L) -> (init, seed) -> (mse, last5)
for c in cells:
    if c["status"] != "complete":
        continue
    by[(c["activation"], int(c["prompt_length"]))][(int(c["init_seed"]), int(c["seed"]))] = (
        float(c["test_mse"]), last5.get(c["cell_id"], float("nan")))

print("| L | pairs | softmax test MSE | linear test MSE | paired gap softmax − linear (95 % CI) | softmax lower in | gap on the mean of the last 5 evaluations (95 % CI; pairs with trajectories) |")
print("|---|---|---|---|---|---|---|")
from math import sqrt
from scipy.stats import t as student_t  # Debian: python3-scipy


def tq(dof):
    return student_t.ppf(0.975, dof)


def mean_ci(g):
    """Mean and the half-width of its 95 % Student-t interval."""
    g = np.asarray(g, dtype=float)
    return g.mean(), (tq(len(g) - 1) * g.std(ddof=1) / sqrt(len(g)) if len(g) > 1 else float("nan"))


for L in Ls:
    s, p = by[("softmax", L)], by[("poly", L)]
    keys = sorted(set(s) & set(p))
    gap, ci = mean_ci([s[k][0] - p[k][0] for k in keys])
    g5 = [s[k][1] - p[k][1] for k in keys if np.isfinite(s[k][1] - p[k][1])]
    m5, ci5 = mean_ci(g5) if g5 else (float("nan"), float("nan"))
    sm = np.array([s[k][0] for k in keys])
    lm = np.array([p[k][0] for k in keys])
    lower = sum(s[k][0] < p[k][0] for k in keys)
    print(f"| {L} | {len(keys)} | {sm.mean():.3f} ± {sm.std(ddof=1):.3f} | {lm.mean():.3f} ± {lm.std(ddof=1):.3f} | "
          f"{gap:+.3f} ± {ci:.3f} | {lower}/{len(keys)} | {m5:+.3f} ± {ci5:.3f} ({len(g5)} pairs) |")

print()
print("Basin of each initialisation (L = low, H = high; majority over its data seeds; two-means split of log test MSE at each activation and L; - = not run):")
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
            if not votes:
                basin[(a, L, i)] = "-"
                continue
            basin[(a, L, i)] = ("L" if sum(votes) * 2 > len(votes) else "H") + ("" if all(x == votes[0] for x in votes) else "*")
for i in inits:
    print(f"| {i} | " + " | ".join(basin[(a, L, i)] for a in ("softmax", "poly") for L in Ls) + " |")
print()
print("(* = the data seeds disagree)")
def wilson(k, n):
    """95 % Wilson score interval of a fraction k / n."""
    z = 1.959963984540054
    c = (k + z * z / 2) / (n + z * z)
    h = z * sqrt(k * (n - k) / n + z * z / 4) / (n + z * z)
    return c - h, c + h


for a in ("softmax", "poly"):
    frac = []
    for L in Ls:
        run = [i for i in inits if basin[(a, L, i)] != "-"]
        k = sum(basin[(a, L, i)].startswith("L") for i in run)
        lo, hi = wilson(k, len(run))
        frac.append(f"{k}/{len(run)} ({lo:.2f}–{hi:.2f})")
    print(f"- {name[a]}: initialisations in the low basin (95 % Wilson interval) at L = {', '.join(map(str, Ls))}: {', '.join(frac)}")
both = [(L, i) for L in Ls for i in inits if basin[("softmax", L, i)] != "-" and basin[("poly", L, i)] != "-"]
same_act = sum(basin[("softmax", L, i)][0] == basin[("poly", L, i)][0] for L, i in both)
print(f"- softmax and linear in the same basin for the same initialisation: {same_act}/{len(both)} (initialisation, L) points")
for a in ("softmax", "poly"):
    multi = [i for i in inits if sum(basin[(a, L, i)] != "-" for L in Ls) > 1]
    stable = sum(len({basin[(a, L, i)][0] for L in Ls if basin[(a, L, i)] != "-"}) == 1 for i in multi)
    print(f"- {name[a]}: initialisations in the same basin at every L they ran at: {stable}/{len(multi)} (of those run at more than one L)")

print()
print("Paired gap softmax − linear within each basin (the pair's basin = its linear cell's):")
print()
print("| L | low basin: pairs | gap (95 % CI) | high basin: pairs | gap (95 % CI) |")
print("|---|---|---|---|---|")
for L in Ls:
    s_, p_ = by[("softmax", L)], by[("poly", L)]
    cells_ = []
    for which in (True, False):
        g = [s_[k][0] - p_[k][0] for k in sorted(set(s_) & set(p_)) if low_cell[("poly", L) + k] == which]
        m, ci = mean_ci(g) if g else (0.0, 0.0)
        cells_ += [str(len(g)), f"{m:+.3f} ± {ci:.3f}" if g else "–"]
    print(f"| {L} | " + " | ".join(cells_) + " |")
