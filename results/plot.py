#!/usr/bin/python3
# `attnsweep report DIR`: DIR/aggregate.h5 (+ manifest.json, status.json) ->
# DIR/report.html, one self-contained page (figures as base64 PNG). Compiled into the
# attnsweep binary (results/CMakeLists.txt) and written to a temporary file at run time.
# About 930 lines: one script, compiled into the binary, that draws every figure of the
# report from the aggregate alone (no other file to ship beside attnsweep).
#
# usage: plot.py DIR VERSION REGISTRY_JSON RESULT_SCHEMA_JSON
# Prints "figures: N" (the number of <img> on the page) and the page's path.
# Exit codes: 0 written, 2 bad input (no aggregate.h5 ...), 3 a Python module is missing.
import base64
import datetime
import html
import io
import json
import math
import os
import sys

try:
    import numpy as np
    import h5py
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError as e:  # the caller names the Debian packages
    print(f"missing Python module: {e.name}", file=sys.stderr)
    sys.exit(3)

# What the result files hold (experiments/result_schema.cpp), handed over by `attnsweep
# report` as JSON in argv[4] (`attnsweep results-schema --json`): the final metrics and
# trajectories the figures may use, and their axis labels.
METRICS, TRAJECTORIES, LABEL = set(), set(), {}


def set_schema(schema):
    for f in schema["fields"]:
        if f["kind"] == "metric":
            METRICS.add(f["name"])
            LABEL[f["name"]] = f["label"]
        elif f["kind"] == "dataset" and f.get("trajectory"):
            TRAJECTORIES.add(f["trajectory_name"])
            LABEL[f["trajectory_name"]] = f["label"]


def declared(name, kind):
    """`name` as the figures use it; a name the schema lacks is this script's bug, said loudly."""
    if name not in (METRICS if kind == "metric" else TRAJECTORIES):
        die(f"plot.py uses the {kind} {name}, which the result schema does not declare", 1)
    return name

# Order of the activations and scales: the registry (kernels/activation.h), handed over
# by `attnsweep report` as JSON in argv[3] (`attnsweep activations --json`). Their labels
# are aggregate's (/cells/label, results/table.h activation_label): not made here.
ACT_RANK, SCALE_RANK = {}, {}


def set_registry(reg):
    for i, a in enumerate(reg["activations"]):
        ACT_RANK[a["name"]] = i
    for i, s in enumerate(reg["scales"]):
        SCALE_RANK[s["name"]] = i


plt.rcParams.update({
    "figure.dpi": 120, "font.size": 9.5, "axes.titlesize": 10.5, "axes.labelsize": 9.5,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True,
    "grid.alpha": 0.25, "legend.fontsize": 8, "legend.frameon": False,
})


def die(msg, code=2):
    print(f"attnsweep report: {msg}", file=sys.stderr)
    sys.exit(code)


def load(dirname):
    path = os.path.join(dirname, "aggregate.h5")
    if not os.path.exists(path):
        die(f"{path}: missing (run attnsweep aggregate {dirname})")
    data = {"cells": {}, "params": [], "metrics": [], "traj": {}, "skipped": []}
    with h5py.File(path, "r") as f:
        data["n"] = int(f.attrs.get("cells", 0))
        data["version"] = f.attrs.get("attnsweep_version", "")
        if isinstance(data["version"], bytes):
            data["version"] = data["version"].decode()
        for k in f["cells"]:
            d = f["cells"][k]
            desc = d.attrs.get("description", "")
            desc = desc.decode() if isinstance(desc, bytes) else str(desc)
            if d.dtype.kind in "OSU":
                data["cells"][k] = np.array(d.asstr()[()], dtype=object)
            else:
                data["cells"][k] = d[()]
            if desc.startswith("config parameter"):
                data["params"].append(k)
            elif desc.startswith("final metric"):
                data["metrics"].append(k)
        if "skipped" in f:
            data["skipped"] = list(f["skipped"].asstr()[()])
        # the analyses of aggregate: results/paired.h (/paired), results/best_scale.h
        # /fits: aggregate's log-log fits; /cell_groups: each cell's fit and comparison group
        # strings, made by aggregate as /fits and /paired make theirs (never formatted here)
        for name in ("paired", "best_scale", "best_scale_fit", "fits", "cell_groups"):
            data[name] = {}
            if name in f:
                for k in f[name]:
                    d = f[name][k]
                    data[name][k] = np.array(d.asstr()[()], dtype=object) if d.dtype.kind in "OSU" else d[()]
        if "trajectories" in f:
            for k in f["trajectories"]:
                data["traj"][k] = f["trajectories"][k]  # read lazily below
            data["traj"] = {k: v[()] for k, v in data["traj"].items() if v.size * v.dtype.itemsize < (2 << 30)}
    return data


def read_json(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


def is_missing(v):
    return v is None or (isinstance(v, str) and v == "") or (isinstance(v, float) and math.isnan(v))


def is_replicate(key):
    last = key.rsplit(".", 1)[-1]
    return last == "seed" or last.endswith("_seed")


def value_text(v):
    if isinstance(v, (float, np.floating)):
        return str(int(v)) if float(v).is_integer() else f"{float(v):g}"
    return str(v)


def swept_words(failed):
    """' (activation=poly seed=1)': a failed cell's swept keys (status.json's failed_cells[].swept), '' without."""
    swept = failed.get("swept") or {}
    words = " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in sorted(swept.items()))
    return f" ({words})" if words else ""


class Groups:
    """Cells grouped by every config parameter but prompt_length and the replicate keys
    (seed and any *_seed, e.g. init_seed: averaged over, like seeds)."""

    def __init__(self, data):
        cells = data["cells"]
        n = data["n"]
        self.cells = cells
        self.n = n
        keys = [k for k in data["params"] if k != "prompt_length" and not is_replicate(k)]
        rows = []
        for i in range(n):
            rows.append(tuple((k, cells[k][i].item() if hasattr(cells[k][i], "item") else cells[k][i]) for k in keys))
        # Only parameters that vary name a group (task=norm_probe, samples=32 are said once).
        self.varying = [k for j, k in enumerate(keys) if len({value_text(r[j][1]) for r in rows}) > 1]
        self.constant = [(k, rows[0][j][1]) for j, k in enumerate(keys) if k not in self.varying and rows and not is_missing(rows[0][j][1])]
        self.key_of_row = [tuple((k, value_text(v)) for k, v in r if k in self.varying) for r in rows]
        order = sorted(set(self.key_of_row), key=lambda t: self.sort_key(t))
        self.keys = order
        # the activation's part of a group's name: aggregate's /cells/label (results/table.h)
        names = cells.get("label")
        self.label = {g: self.pretty(g, names[self.rows(g)[0]] if names is not None else None) for g in order}

    @staticmethod
    def sort_key(g):
        d = dict(g)
        act = d.get("activation", "")
        rank = ACT_RANK.get(act, len(ACT_RANK))
        return (rank, d.get("degree", ""), SCALE_RANK.get(d.get("scale", ""), len(SCALE_RANK)), g)

    @staticmethod
    def pretty(g, act_label=None):
        """A group's name: the activation's label (aggregate's, when the activation varies),
        then k=v of the other parameters that vary."""
        d = dict(g)
        parts = []
        act = d.pop("activation", None)
        deg = d.pop("degree", None)
        scale = d.pop("scale", None)
        if act is not None or (act_label and (deg is not None or scale is not None)):
            parts.append(act_label or act)
        elif deg not in (None, "nan", ""):
            parts.append(f"degree={deg}")
        if scale not in (None, "", "nan", "none") and act is None and not act_label:
            parts.append(f"scale={scale}")
        parts += [f"{k}={v}" for k, v in d.items() if v not in ("", "nan")]
        return ", ".join(parts) if parts else "all cells"

    def rows(self, g, mask=None):
        idx = [i for i in range(self.n) if self.key_of_row[i] == g]
        if mask is not None:
            idx = [i for i in idx if mask[i]]
        return np.array(idx, dtype=int)


def fig_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


# Okabe & Ito's colour-blind-safe palette (black is kept for reference lines), and a
# marker and a line style per series, so that series stay apart in grey or overlapping.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#F0E442", "#999999"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", "-.", ":"]


def colors(n):
    return [PALETTE[i % len(PALETTE)] for i in range(n)]


def styles(n):
    """Colour, marker and line style of series i: the three cycle at different periods."""
    return [dict(color=PALETTE[i % len(PALETTE)], marker=MARKERS[i % len(MARKERS)],
                 ls=LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)]) for i in range(n)]


def plural(k, word):
    return f"{k} {word}" + ("" if k == 1 else "s")


def n_ticks(ax, ns):
    """Ticks at the grid's prompt lengths (a log axis alone would skip N = 49)."""
    ns = sorted({int(n) for n in ns if np.isfinite(n)})
    if not ns:
        return
    ax.set_xticks(ns)
    ax.set_xticks([], minor=True)
    ax.set_xticklabels([str(n) for n in ns])


def slope_text(slope):
    return f"{0.0 if abs(slope) < 0.005 else slope:+.2f}"  # no "-0.00" in legends


def finite_reduce(a, axis, how):
    """mean / min / max over `axis` of the finite values; NaN where there is none (a cell's
    NaN padding, a step no cell logged), said explicitly rather than by numpy's warning."""
    a = np.asarray(a, dtype=float)
    ok = np.isfinite(a)
    count = ok.sum(axis=axis)
    if how == "mean":
        out = np.where(ok, a, 0.0).sum(axis=axis) / np.maximum(count, 1)
    elif how == "min":
        out = np.where(ok, a, np.inf).min(axis=axis)
    else:
        out = np.where(ok, a, -np.inf).max(axis=axis)
    return np.where(count > 0, out, np.nan)


def per_n(values, ns):
    """Mean and std over seeds at each prompt length."""
    out_n, mean, std, count = [], [], [], []
    for n in np.unique(ns):
        v = values[(ns == n) & np.isfinite(values)]
        if len(v) == 0:
            continue
        out_n.append(n)
        mean.append(v.mean())
        std.append(v.std(ddof=1) if len(v) > 1 else 0.0)
        count.append(len(v))
    return np.array(out_n, dtype=float), np.array(mean), np.array(std), count


def legend_outside(ax, ncol=1):
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), ncol=ncol, borderaxespad=0)


class Report:
    def __init__(self, data, groups):
        self.data, self.g = data, groups
        c = data["cells"]
        self.complete = np.array([s == "complete" for s in c["status"]], dtype=bool) if data["n"] else np.zeros(0, bool)
        self.N = c["prompt_length"].astype(float) if "prompt_length" in c else None
        self.figures = []  # (title, caption, png)

    def metric(self, name):
        c = self.data["cells"]
        if name not in self.data["metrics"] or name not in c:
            return None
        v = c[name].astype(float)
        return v if np.isfinite(v[self.complete]).any() else None

    def add(self, title, caption, fig, data=None):
        """A figure; `data` (JSON) is what it plots, for tests: the page carries it."""
        self.figures.append((title, caption, fig_png(fig), data or {}))

    def fit_of(self, metric, idx):
        """aggregate's fit (/fits) of `metric` for the cells idx (one group), or None."""
        fits, cg = self.data["fits"], self.data["cell_groups"]
        if not fits or "fit_group" not in cg or len(idx) == 0:
            return None
        group = cg["fit_group"][idx[0]]
        for k in range(len(fits.get("metric", []))):
            if fits["metric"][k] == metric and fits["group"][k] == group:
                return {f: fits[f][k] for f in ("slope", "intercept", "slope_ci95", "points", "n_min", "n_max")}
        return None

    def budget(self, mask):
        """What the cells of `mask` cost: their steps (or samples) and seeds, for a caption."""
        c, params = self.data["cells"], self.data["params"]
        idx = np.where(mask)[0]
        done = int(np.count_nonzero(self.complete[idx]))
        parts = [plural(done, "complete cell") + (f" and {len(idx) - done} diverged" if len(idx) > done else "")]
        for key, word in (("steps", "training step"), ("samples", "sample")):
            if key in c and key in params:
                vals = sorted({value_text(c[key][i]) for i in idx if not is_missing(c[key][i])})
                if vals:
                    parts.append(f"{'–'.join(vals) if len(vals) > 1 else vals[0]} {word}" + ("" if vals == ["1"] else "s"))
        if "eval_batches" in c and "eval_batches" in params and "batch" in c:
            ev = sorted({(int(float(c["eval_batches"][i])), int(float(c["batch"][i]))) for i in idx
                         if not is_missing(c["eval_batches"][i]) and not is_missing(c["batch"][i])})
            if ev:
                parts.append("test metrics on " + "; ".join(
                    "the whole test split" if e == 0 else f"{e} test batches ({e * b:,} samples)" for e, b in ev))
        reps = [k for k in params if is_replicate(k)]
        if reps:
            seeds = {tuple(value_text(c[k][i]) for k in reps) for i in idx}
            varying = [k for k in reps if len({value_text(c[k][i]) for i in idx}) > 1]
            parts.append(plural(len(seeds), "seed") + (f" ({' × '.join(varying)})" if len(varying) > 1 else ""))
        return ", ".join(parts)

    # (1) norms at initialisation against N
    def norms_vs_n(self):
        if self.N is None or len(np.unique(self.N[self.complete])) < 2:
            return
        panels = [(declared(m, "metric"), b) for m, b in (("attn_fro", 1.0), ("jac_fro", 0.5))]
        panels = [(m, b) for m, b in panels if self.metric(m) is not None]
        if not panels:
            return
        fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.4), squeeze=False)
        sty = styles(len(self.g.keys))
        nmin, nmax = np.nanmin(self.N[self.complete]), np.nanmax(self.N[self.complete])
        plotted, fit_range = {}, set()
        for ax, (m, bound) in zip(axes[0], panels):
            v = self.metric(m)
            plotted[m] = {}
            for st, g in zip(sty, self.g.keys):
                idx = self.g.rows(g, self.complete & np.isfinite(v) & (v > 0))
                if len(idx) == 0:
                    continue
                ns, mean, std, _ = per_n(v[idx], self.N[idx])
                fit = self.fit_of(m, idx)  # the slope is aggregate's, over its N range
                lab = self.g.label[g]
                if fit is not None and math.isfinite(float(fit["slope"])):
                    lab += f"  (slope {slope_text(float(fit['slope']))})"
                    fit_range.add((int(fit["n_min"]), int(fit["n_max"])))
                    plotted[m][self.g.label[g]] = float(fit["slope"])
                ax.errorbar(ns, mean, yerr=std, color=st["color"], marker=st["marker"], ls=st["ls"], ms=4.5, lw=1.3,
                            capsize=2.5, label=lab, zorder=2)
            xs = np.geomspace(nmin, nmax, 50)
            blab = "bound √N" if bound == 1.0 else "bound √N/2"
            # drawn last and on top: a scaled line of slope ½ must not hide it
            ax.plot(xs, bound * np.sqrt(xs), color="black", ls=(0, (5, 3)), lw=1.6, label=blab, zorder=5)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            n_ticks(ax, self.N[self.complete])
            ax.set_xlabel("prompt length N")
            ax.set_ylabel(LABEL[m])
            ax.set_title(("Activation norm" if m == "attn_fro" else "Jacobian norm") + " at initialisation")
            ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7.5)
        fig.tight_layout()
        if fit_range:
            rng = "; ".join(f"N {a}–{b}" for a, b in sorted(fit_range))
            fits_text = (f"The legend of each panel gives each group's slope of that panel's norm: aggregate's "
                         f"least-squares fit of log norm on log N over complete cells with {rng} "
                         "(aggregate.h5 /fits, attnsweep aggregate --fit-min-n / --fit-max-n).")
        else:
            fits_text = "aggregate.h5 holds no fit of these cells, so the legends give no slope."
        self.add("Norm laws at initialisation",
                 "Frobenius norm of the attention activation φ(S) (left) and of its Jacobian ∂φ(S)/∂S (right) "
                 "against prompt length N, log–log; mean over seeds, error bars ±1 sd. " + fits_text +
                 " Dashed black: the reference curves √N (left) and √N/2 (right). From "
                 + self.budget(self.complete) + ".", fig,
                 {"slopes": plotted, "xticks": [float(t) for t in axes[0][0].get_xticks()]})

    # (2) per-layer norm trajectories over training
    def norm_trajectories(self):
        tr = self.data["traj"]
        names = [declared(n, "trajectory") for n in ("norms_attn_fro", "norms_jac_fro")]
        names = [n for n in names if n in tr and tr[n].ndim == 4 and tr[n].shape[1] > 1]
        names = [n for n in names if np.isfinite(tr[n]).any()]
        if not names:
            return
        step = tr.get(declared("train_step", "trajectory"))
        groups = []
        for g in self.g.keys:
            idx = self.g.rows(g, self.complete)
            idx = [i for i in idx if np.isfinite(tr[names[0]][i]).any()]
            if not idx:
                continue
            if self.N is not None:  # the largest prompt length of the group
                nmax = max(self.N[i] for i in idx)
                idx = [i for i in idx if self.N[i] == nmax]
            groups.append((g, np.array(idx)))
        groups = groups[:6]
        if not groups:
            return
        fig, axes = plt.subplots(len(names), len(groups), figsize=(min(10.5, 2.3 * len(groups) + 1.4), 2.5 * len(names)),
                                 squeeze=False, sharex=True)
        for r, name in enumerate(names):
            arr = tr[name]
            L = arr.shape[2]
            cols = plt.get_cmap("viridis")(np.linspace(0.05, 0.85, L))
            for c, (g, idx) in enumerate(groups):
                ax = axes[r][c]
                per_cell = finite_reduce(arr[idx], 3, "mean")  # [cells, T, L], mean over heads
                mean = finite_reduce(per_cell, 0, "mean")  # [T, L] over seeds
                x = finite_reduce(step[idx], 0, "mean") if step is not None and step.shape[1] >= arr.shape[1] else np.arange(arr.shape[1])
                x = x[: arr.shape[1]]
                for layer in range(L):
                    y = mean[:, layer]
                    if np.isfinite(y).any():
                        ax.plot(x, y, color=cols[layer], lw=1.3, label=f"layer {layer + 1}")
                title = self.g.label[g] + (f", N={int(self.N[idx[0]])}" if self.N is not None else "")
                if r == 0:
                    ax.set_title(title)
                if c == 0:
                    ax.set_ylabel(LABEL[name])
                if r == len(names) - 1:
                    ax.set_xlabel("training step")
        legend_outside(axes[0][-1])
        fig.tight_layout()
        shown = np.zeros(self.g.n, bool)
        shown[np.concatenate([idx for _, idx in groups])] = True
        self.add("Norms over training, per layer",
                 "‖φ(S)‖_F (top) and ‖∂φ(S)/∂S‖_F (bottom) of each layer against the training step, mean over "
                 "heads and over seeds, one panel per activation at its largest prompt length"
                 + (f" (the first 6 of {len(self.g.keys)} groups)" if len(self.g.keys) > 6 else "")
                 + ". From " + self.budget(shown) + ".", fig,
                 {"panels": {self.g.label[g]: len(idx) for g, idx in groups}})

    # (3) test accuracy against N
    def accuracy_vs_n(self):
        acc = self.metric(declared("test_accuracy", "metric"))
        if acc is None or self.N is None:
            return
        fig, ax = plt.subplots(figsize=(7.4, 3.9))
        shown = np.zeros(self.g.n, bool)
        for st, g in zip(styles(len(self.g.keys)), self.g.keys):
            idx = self.g.rows(g, self.complete & np.isfinite(acc))
            if len(idx) == 0:
                continue
            ns, mean, std, count = per_n(acc[idx], self.N[idx])
            seeds = f"{min(count)}–{max(count)}" if min(count) != max(count) else str(max(count))
            ax.errorbar(ns, mean, yerr=std, color=st["color"], marker=st["marker"], ls=st["ls"], ms=4.5, lw=1.4,
                        capsize=3, label=f"{self.g.label[g]} ({seeds} seed{'' if seeds == '1' else 's'})")
            shown[idx] = True
        ax.set_xscale("log", base=2)
        n_ticks(ax, self.N[shown])
        ax.set_xlabel("prompt length N (tokens)")
        ax.set_ylabel(LABEL["test_accuracy"])
        ax.set_title("Test accuracy against prompt length")
        legend_outside(ax)
        fig.tight_layout()
        self.add("Accuracy against prompt length",
                 "Final test accuracy of each activation at each prompt length N; mean over seeds, error bars "
                 "±1 sd (diverged cells left out). Activations: "
                 + ", ".join(self.g.label[g] for g in self.g.keys if len(self.g.rows(g, shown))) + ". From "
                 + self.budget(shown) + ".", fig, {"xticks": [float(t) for t in ax.get_xticks()]})

    # (4) paper B: concentration and test risk
    def concentration(self):
        lim, mse = self.metric(declared("limit_sq_error", "metric")), self.metric(declared("test_mse", "metric"))
        if self.N is None or (lim is None and mse is None):
            return
        panels = [p for p in (("limit_sq_error", lim), ("test_mse", mse)) if p[1] is not None]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.0 * len(panels) + 2.0, 3.9), squeeze=False)
        shown = np.zeros(self.g.n, bool)
        for ax, (name, v) in zip(axes[0], panels):
            for st, g in zip(styles(len(self.g.keys)), self.g.keys):
                idx = self.g.rows(g, self.complete & np.isfinite(v))
                if len(idx) == 0:
                    continue
                shown[idx] = True
                ns, mean, std, _ = per_n(v[idx], self.N[idx])
                lab = self.g.label[g]
                fit = self.fit_of(name, idx) if name == "limit_sq_error" else None  # aggregate's /fits
                if fit is not None and math.isfinite(float(fit["slope"])):
                    lab += f"  (slope {slope_text(float(fit['slope']))})"
                ax.errorbar(ns, mean, yerr=std, color=st["color"], marker=st["marker"], ls=st["ls"], ms=4.5, lw=1.4,
                            capsize=3, label=lab)
            ax.set_xscale("log", base=2)
            n_ticks(ax, self.N[shown])
            ax.set_xlabel("context length L")
            if name == "limit_sq_error":
                ax.set_yscale("log")
                ax.set_ylabel(LABEL[name])
                ax.set_title("Concentration around the Gaussian limit")
            else:
                ax.set_ylabel(LABEL[name])
                ax.set_title("In-context regression test risk")
            ax.legend(loc="best")
        fig.tight_layout()
        self.add("In-context regression: concentration and test risk",
                 "Left: squared distance between finite-L softmax attention and its Gaussian limit against the "
                 "context length L, log–log; the legend gives the slope of aggregate's least-squares fit of the log "
                 "distance on log L (aggregate.h5 /fits). Right: test MSE of trained attention against L. Means "
                 "over seeds, error bars ±1 sd. From " + self.budget(shown) + ".", fig)

    # (4b) paired comparisons (results/paired.h): cells equal but for the activation
    def paired(self):
        pd = self.data["paired"]
        if not pd or len(pd.get("metric", [])) == 0:
            return
        present = set(pd["metric"])
        metric = next((m for m in map(lambda n: declared(n, "metric"), ("test_mse", "test_accuracy", "test_loss")) if m in present), None)
        if metric is None:
            return
        c = self.data["cells"]
        params = self.data["params"]

        cg = self.data["cell_groups"]
        if "paired_group" not in cg or "paired_spec" not in cg:
            die("aggregate.h5 has no /cell_groups (made by an older attnsweep): run attnsweep aggregate again")
        # which comparison a cell takes part in: aggregate's strings, matched as they are
        spec_of, group_of = cg["paired_spec"], cg["paired_group"]
        names = c.get("label")

        def pretty(spec):  # a/b as the report names the activation (/cells/label)
            i = next((i for i in range(self.data["n"]) if spec_of[i] == spec), None)
            return names[i] if names is not None and i is not None and names[i] else spec

        # against prompt length: rows of cells that have one
        rows = [r for r in np.where(pd["metric"] == metric)[0] if np.isfinite(float(pd["prompt_length"][r]))]
        # the comparisons against softmax first (the papers' question), then the others
        comparisons = sorted({(pd["group"][r], pd["a"][r], pd["b"][r]) for r in rows},
                             key=lambda t: ("activation=softmax" not in (t[1], t[2]), t))
        if not comparisons or self.N is None:
            return self.paired_by_group(metric, lambda i: (spec_of[i], group_of[i]), pretty)
        if len(comparisons) > 6:
            comparisons = comparisons[:6]
        # a group is named by the parameters that differ between the compared groups only
        kv = {g: dict(x.split("=", 1) for x in g.split(" ") if "=" in x) for g, _, _ in comparisons}
        varying = sorted({k for d in kv.values() for k in d if len({e.get(k) for e in kv.values()}) > 1})
        short = {g: ", ".join(f"{k}={kv[g].get(k, '–')}" for k in varying) for g in kv}
        v = c[metric].astype(float) if metric in c else np.full(self.data["n"], np.nan)
        # the replicate keys that vary between cells (a seed key fixed in every cell is no replicate)
        reps = [k for k in params if is_replicate(k) and len({value_text(x) for x in c[k]}) > 1]
        fig, axes = plt.subplots(len(comparisons), 2, figsize=(11.0, 3.7 * len(comparisons)), squeeze=False)
        plotted, shown = [], np.zeros(self.g.n, bool)
        for (group, a, b), (ax, ax2) in zip(comparisons, axes):
            sel = [r for r in rows if pd["group"][r] == group and pd["a"][r] == a and pd["b"][r] == b]
            sel.sort(key=lambda r: pd["prompt_length"][r])
            n = np.array([pd["prompt_length"][r] for r in sel], float)
            d = np.array([pd["mean_diff"][r] for r in sel], float)
            ci = np.array([pd["ci95"][r] for r in sel], float)
            pairs = [int(pd["pairs"][r]) for r in sel]
            lower = [int(pd["a_lower"][r]) for r in sel]
            ax.axhline(0, color="0.6", lw=0.8)
            ax.errorbar(n, d, yerr=np.where(np.isfinite(ci), ci, 0), marker="o", ms=5, lw=1.5, capsize=4, color=PALETTE[4])
            for x, y, k, m in zip(n, d, lower, pairs):
                ax.annotate(f"{k}/{m}", (x, y), textcoords="offset points", xytext=(6, 6), fontsize=8, color="0.3")
            ax.set_xscale("log")
            ax.set_xlabel("prompt length")
            ax.set_ylabel(f"{metric}: {pretty(a)} − {pretty(b)}")
            ax.set_title("Paired difference, 95% CI" + (f" · {short[group]}" if short[group] else ""), fontsize=10)
            # the distribution over initialisations: every cell, each pair joined by a line
            ok = self.complete & np.isfinite(v)
            cells = {}
            for i in range(self.data["n"]):
                if ok[i] and group_of[i] == group and spec_of[i] in (a, b):
                    # a pair: the same prompt length and replicates (the group is the same)
                    key = (float(self.N[i]),) + tuple(c[k][i].item() if hasattr(c[k][i], "item") else c[k][i] for k in reps)
                    cells.setdefault(key, {})[spec_of[i]] = v[i]
                    shown[i] = True
            points = {}
            for side, spec, st in ((-1, a, styles(2)[0]), (1, b, styles(2)[1])):
                xs = [k[0] * (1.07 ** side) for k, m in cells.items() if spec in m]
                ys = [m[spec] for k, m in cells.items() if spec in m]
                points[pretty(spec)] = len(xs)
                ax2.scatter(xs, ys, s=16, color=st["color"], marker=st["marker"], alpha=0.8, label=pretty(spec), zorder=3)
            joined = 0
            for k, m in cells.items():
                if a in m and b in m:
                    joined += 1
                    ax2.plot([k[0] / 1.07, k[0] * 1.07], [m[a], m[b]], color="0.6", lw=0.7, zorder=2)
            plotted.append({"group": group, "a": a, "b": b, "points": points, "pairs_joined": joined})
            if cells:
                ax2.set_xscale("log")
                n_ticks(ax2, [k[0] for k in cells])
            n_ticks(ax, n)
            ax2.set_xlabel("prompt length")
            ax2.set_ylabel(metric)
            ax2.set_title("Every cell (one point per " + " × ".join(reps or ["cell"]) + "), pairs joined", fontsize=10)
            if cells:
                ax2.legend(loc="best", fontsize=8)
        fig.tight_layout()
        self.add("Paired comparison of activations",
                 "Cells equal in every parameter but the activation, seeds included (the same initialisation and "
                 "data), are compared pair by pair. Left: mean over pairs of the difference of the final "
                 f"{metric} against prompt length, with its 95% Student-t interval; k/m = pairs where the first "
                 "activation's value is the lower. Right: every cell a point (one per seed), each pair joined "
                 "by a line. From aggregate.h5 /paired (also paired.csv), " + self.budget(shown) + ".", fig,
                 {"comparisons": plotted})

    # (4b') cells without a prompt length (a command task's): one point per group of the
    # other parameters instead of a curve against N
    def paired_by_group(self, metric, spec_and_group, pretty):
        pd = self.data["paired"]
        rows = [r for r in np.where(pd["metric"] == metric)[0] if not np.isfinite(float(pd["prompt_length"][r]))]
        pairs_of = sorted({(pd["a"][r], pd["b"][r]) for r in rows},
                          key=lambda t: ("activation=softmax" not in t, t))[:6]
        if not pairs_of:
            return
        c = self.data["cells"]
        v = c[metric].astype(float) if metric in c else np.full(self.data["n"], np.nan)
        labels = [spec_and_group(i) for i in range(self.data["n"])]
        shown = np.zeros(self.data["n"], bool)
        fig, axes = plt.subplots(len(pairs_of), 2, figsize=(11.0, 3.7 * len(pairs_of)), squeeze=False)
        for (a, b), (ax, ax2) in zip(pairs_of, axes):
            sel = sorted((r for r in rows if pd["a"][r] == a and pd["b"][r] == b), key=lambda r: pd["group"][r])
            groups = [pd["group"][r] for r in sel]
            kv = {g: dict(x.split("=", 1) for x in g.split(" ") if "=" in x) for g in groups}
            varying = sorted({k for d in kv.values() for k in d if len({e.get(k) for e in kv.values()}) > 1})
            names = [", ".join(f"{k}={kv[g].get(k, '–')}" for k in varying) or "all cells" for g in groups]
            x = np.arange(len(sel))
            d = np.array([pd["mean_diff"][r] for r in sel], float)
            ci = np.array([pd["ci95"][r] for r in sel], float)
            ax.axhline(0, color="0.6", lw=0.8)
            ax.errorbar(x, d, yerr=np.where(np.isfinite(ci), ci, 0), marker="o", ms=5, lw=0, elinewidth=1.5,
                        capsize=4, color="C3")
            for xi, r in zip(x, sel):
                ax.annotate(f"{int(pd['a_lower'][r])}/{int(pd['pairs'][r])}", (xi, d[xi]), textcoords="offset points",
                            xytext=(6, 6), fontsize=8, color="0.3")
            ax.set_xticks(x, names, fontsize=8)
            ax.set_xlim(-0.5, len(sel) - 0.5)
            ax.set_ylabel(f"{metric}: {pretty(a)} − {pretty(b)}")
            ax.set_title("Paired difference, 95% CI", fontsize=10)
            ok = self.complete & np.isfinite(v)
            for xi, g in zip(x, groups):
                cells = {}
                for i in range(self.data["n"]):
                    spec, gr = labels[i]
                    if ok[i] and gr == g and spec in (a, b):
                        shown[i] = True
                        key = tuple(value_text(c[k][i].item() if hasattr(c[k][i], "item") else c[k][i])
                                    for k in self.data["params"] if is_replicate(k))
                        cells.setdefault(key, {})[spec] = v[i]
                for side, spec, col in ((-1, a, "C0"), (1, b, "C1")):
                    ys = [m[spec] for m in cells.values() if spec in m]
                    ax2.scatter([xi + 0.12 * side] * len(ys), ys, s=12, color=col, alpha=0.75, zorder=3,
                                label=pretty(spec) if xi == 0 else None)
                for m in cells.values():
                    if a in m and b in m:
                        ax2.plot([xi - 0.12, xi + 0.12], [m[a], m[b]], color="0.7", lw=0.6, zorder=2)
            ax2.set_xticks(x, names, fontsize=8)
            ax2.set_xlim(-0.5, len(sel) - 0.5)
            ax2.set_ylabel(metric)
            ax2.set_title("Every cell, pairs joined", fontsize=10)
            ax2.legend(loc="best", fontsize=8)
        fig.tight_layout()
        self.add("Paired comparison of activations",
                 "Cells equal in every parameter but the activation, seeds included (the same initialisation and "
                 f"data), are compared pair by pair. Left: mean over pairs of the difference of the final {metric} "
                 "per group of the other parameters, with its 95% Student-t interval; k/m = pairs where the first "
                 "activation's value is the lower. Right: every cell a point, each pair joined. From aggregate.h5 "
                 "/paired (also paired.csv), " + self.budget(shown) + ".", fig)

    # (4c) the best scale c* against N (results/best_scale.h; paper A's Fig. 1)
    def best_scale(self):
        bs, fits = self.data["best_scale"], self.data["best_scale_fit"]
        if not bs or len(bs.get("metric", [])) == 0:
            return
        metric = next((m for m in map(lambda n: declared(n, "metric"), ("test_accuracy", "test_loss", "test_mse")) if m in set(bs["metric"])), None)
        rows = [r for r in range(len(bs["metric"])) if bs["metric"][r] == metric]
        groups = sorted({bs["group"][r] for r in rows})[:6]
        c = self.data["cells"]
        v = c[metric].astype(float) if metric in c else None
        scale = np.array([float(x) if not isinstance(x, str) else np.nan for x in c["scale"]]) if "scale" in c else None
        fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0), squeeze=False)
        ax, ax2 = axes[0]
        ns = sorted({float(bs["prompt_length"][r]) for r in rows})
        for col, n in zip(colors(len(ns)), ns):
            if v is None or scale is None or self.N is None:
                break
            sel = self.complete & (self.N == n) & np.isfinite(scale) & np.isfinite(v)
            cs = np.unique(scale[sel])
            mean = [v[sel & (scale == x)].mean() for x in cs]
            sd = [v[sel & (scale == x)].std(ddof=1) if (sel & (scale == x)).sum() > 1 else 0 for x in cs]
            ax.errorbar(cs, mean, yerr=sd, color=col, marker="o", ms=4, capsize=3, lw=1.3, label=f"N = {int(n)}")
            for r in rows:
                if float(bs["prompt_length"][r]) == n:
                    ax.axvline(float(bs["c_star"][r]), color=col, lw=0.8, ls="--")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("scale c")
        ax.set_ylabel(metric)
        ax.set_title("Final metric against the scale (mean ± sd over seeds; dashed: c*)", fontsize=10)
        ax.legend(loc="best", fontsize=8)
        for col, g in zip(colors(len(groups)), groups):
            sel = sorted((r for r in rows if bs["group"][r] == g), key=lambda r: float(bs["prompt_length"][r]))
            n = np.array([float(bs["prompt_length"][r]) for r in sel])
            cs = np.array([float(bs["c_star"][r]) for r in sel])
            lo = np.array([float(bs["c_lo"][r]) for r in sel])
            hi = np.array([float(bs["c_hi"][r]) for r in sel])
            lab = "c*(N), 95% bootstrap interval"
            for k in range(len(fits.get("metric", []))):
                if fits["metric"][k] == metric and fits["group"][k] == g:
                    sl, a = float(fits["slope"][k]), float(fits["intercept"][k])
                    lab = (f"slope {sl:+.2f} [{float(fits['slope_lo'][k]):+.2f}, {float(fits['slope_hi'][k]):+.2f}]")
                    xs = np.array([n.min(), n.max()])
                    ax2.plot(xs, np.exp(a) * xs ** sl, color=col, lw=1.0)
                    ax2.plot(xs, cs[0] * (xs / n[0]) ** -0.5, color="0.5", lw=0.9, ls=":",
                             label="slope −½ (1/√N) through the first point" if col == colors(len(groups))[0] else None)
            edge = np.array([bool(bs["at_edge"][r]) for r in sel])
            ax2.errorbar(n, cs, yerr=[np.maximum(cs - lo, 0), np.maximum(hi - cs, 0)], color=col, marker="o", ms=5, capsize=4, lw=0, elinewidth=1.3,
                         label=lab + (f" · {g}" if len(groups) > 1 else ""))
            if edge.any():
                ax2.scatter(n[edge], cs[edge], marker="x", s=60, color="k", zorder=4, label="at the edge of the grid")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel("prompt length N")
        ax2.set_ylabel("best scale c*")
        ax2.set_title("Best scale against prompt length", fontsize=10)
        ax2.legend(loc="best", fontsize=8)
        fig.tight_layout()
        self.add("Best scale against prompt length",
                 f"Left: final {metric} against the numeric scale c at each prompt length N. Right: the best "
                 "scale c*(N) (the vertex of a parabola in log c through the best mean and its neighbours), with a "
                 "95% bootstrap interval over seeds, and the least-squares line of log c* on log N with its "
                 "bootstrap interval; dotted: a line of slope −½ (c ∝ 1/√N) through the first point. A cross "
                 "marks a c* at the edge of the grid (the best scale may lie beyond it). From aggregate.h5 "
                 "/best_scale, " + self.budget(self.complete) + ".", fig)

    # (5) loss curves
    def loss_curves(self):
        tr = self.data["traj"]
        loss = tr.get(declared("train_loss", "trajectory"))
        if loss is None or loss.ndim != 2 or loss.shape[1] < 2 or not np.isfinite(loss).any():
            return
        step = tr.get(declared("train_step", "trajectory"))
        ns = sorted(np.unique(self.N[np.isfinite(self.N)])) if self.N is not None else [None]
        if len(ns) > 4:
            ns = [ns[int(round(i))] for i in np.linspace(0, len(ns) - 1, 4)]
        fig, axes = plt.subplots(1, len(ns), figsize=(min(10.5, 2.6 * len(ns) + 2.4), 3.4), squeeze=False, sharey=True)
        finite = loss[np.isfinite(loss)]
        log_y = finite.size and finite.min() > 0 and finite.max() / finite.min() > 30
        shown = np.zeros(self.g.n, bool)
        for ax, n in zip(axes[0], ns):
            for st, g in zip(styles(len(self.g.keys)), self.g.keys):
                mask = np.ones(self.g.n, bool) if n is None else (self.N == n)
                idx = self.g.rows(g, mask)
                idx = [i for i in idx if np.isfinite(loss[i]).any()]
                if not idx:
                    continue
                shown[idx] = True
                y = loss[idx]
                x = finite_reduce(step[idx], 0, "mean") if step is not None else np.arange(y.shape[1])
                mean, lo, hi = finite_reduce(y, 0, "mean"), finite_reduce(y, 0, "min"), finite_reduce(y, 0, "max")
                ok = np.isfinite(mean) & np.isfinite(x)
                ax.plot(x[ok], mean[ok], color=st["color"], ls=st["ls"], lw=1.3,
                        label=f"{self.g.label[g]} ({plural(len(idx), 'seed')})")
                if len(idx) > 1:
                    ax.fill_between(x[ok], lo[ok], hi[ok], color=st["color"], alpha=0.18, lw=0)
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("training step")
            ax.set_title(f"N = {int(n)}" if n is not None else "all cells")
        axes[0][0].set_ylabel("training loss")
        legend_outside(axes[0][-1])
        fig.tight_layout()
        per_n = ("one panel per prompt length N (up to four)" if ns != [None]
                 else "one panel for all cells (they have no prompt length)")
        self.add("Training loss",
                 "Training loss against step for each activation, " + per_n + "; "
                 "line = mean over seeds, band = range over seeds. Diverged cells end where their loss became "
                 "non-finite. From " + self.budget(shown) + ".", fig,
                 {"legends": [[t for t in ax.get_legend_handles_labels()[1]] for ax in axes[0]]})

    def table(self):
        c = self.data["cells"]
        metrics = [m for m in self.data["metrics"] if self.metric(m) is not None]
        if not metrics or self.data["n"] == 0:
            return "", 0
        # the first column holds the group's name: say what names it
        named = []
        for k in self.g.varying:
            k = "activation" if k in ("activation", "degree", "scale") else k
            if k not in named:
                named.append(k)
        head = [", ".join(named) if named else "cells"]
        if self.N is not None:
            head.append("N")
        head.append("seeds")
        head += metrics
        rows = []
        for g in self.g.keys:
            idx_all = self.g.rows(g)
            ns = sorted(np.unique(self.N[idx_all])) if self.N is not None else [None]
            for n in ns:
                idx = [i for i in idx_all if n is None or self.N[i] == n]
                done = [i for i in idx if self.complete[i]]
                div = len(idx) - len(done)
                cells = [html.escape(self.g.label[g])]
                if n is not None:
                    cells.append(value_text(n))
                cells.append(f"{len(done)}" + (f" <span class=bad>+{div} diverged</span>" if div else ""))
                for m in metrics:
                    v = c[m].astype(float)[done] if done else np.array([])
                    v = v[np.isfinite(v)]
                    if len(v) == 0:
                        cells.append("–")
                    elif len(v) == 1:
                        cells.append(f"{v[0]:.4g}")
                    else:
                        cells.append(f"{v.mean():.4g} <span class=pm>± {v.std(ddof=1):.2g}</span>")
                rows.append(cells)
        out = ["<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
        for r in rows:
            out.append("<tr>" + "".join(f"<td>{x}</td>" for x in r) + "</tr>")
        out.append("</tbody></table>")
        return "\n".join(out), len(rows)


CSS = """
:root { --ink:#1d2330; --muted:#5b6577; --line:#e3e7ee; --bg:#f6f7f9; --accent:#2f5fb3; }
* { box-sizing: border-box; }
body { margin:0; background:var(--bg); color:var(--ink);
  font: 15px/1.55 -apple-system, "Segoe UI", "DejaVu Sans", Roboto, Helvetica, Arial, sans-serif; }
header { background:#fff; border-bottom:1px solid var(--line); }
.wrap { max-width:1180px; margin:0 auto; padding:0 28px; }
header .wrap { padding-top:26px; padding-bottom:20px; }
h1 { font-size:25px; margin:0 0 4px; letter-spacing:-0.01em; }
h1 .grid { color:var(--accent); }
.sub { color:var(--muted); font-size:13.5px; }
.stats { display:flex; flex-wrap:wrap; gap:12px; margin-top:16px; }
.stat { background:var(--bg); border:1px solid var(--line); border-radius:8px; padding:8px 16px; min-width:110px; }
.stat b { display:block; font-size:21px; font-variant-numeric: tabular-nums; }
.stat span { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.05em; }
.stat.ok b { color:#207245; } .stat.warn b { color:#a86400; } .stat.bad b { color:#b3261e; }
main { padding:8px 0 40px; }
h2 { font-size:18px; margin:30px 0 10px; }
figure { background:#fff; border:1px solid var(--line); border-radius:10px; margin:0 0 22px; padding:18px 18px 12px; }
figure img { display:block; max-width:100%; height:auto; margin:0 auto; }
figcaption { color:var(--muted); font-size:13.5px; margin-top:10px; border-top:1px solid var(--line); padding-top:10px; }
figcaption b { color:var(--ink); }
.card { background:#fff; border:1px solid var(--line); border-radius:10px; padding:6px 0; overflow-x:auto; }
table { border-collapse:collapse; width:100%; font-size:13px; font-variant-numeric: tabular-nums; }
th, td { padding:6px 12px; text-align:right; white-space:nowrap; }
th:first-child, td:first-child { text-align:left; }
thead th { position:sticky; top:0; background:#fff; border-bottom:2px solid var(--line); font-weight:600; }
tbody tr:nth-child(even) { background:#fafbfc; }
tbody tr:hover { background:#eef3fb; }
.pm { color:var(--muted); } .bad { color:#b3261e; }
.note { color:var(--muted); font-size:13px; }
.verdict { font-weight:600; } .verdict.ok { color:#1a7f37; } .verdict.bad { color:#cf222e; } .verdict.warn { color:#9a6700; }
ul.skipped { font: 12.5px/1.5 ui-monospace, "DejaVu Sans Mono", monospace; color:#7a4b00; }
footer { color:var(--muted); font-size:12px; padding:18px 0 30px; border-top:1px solid var(--line); }
"""


def verdicts_section(dirname, manifest):
    """The grid's claims decided by `attnsweep verdict` (DIR/verdicts.csv, written by report
    just before): one row a claim, the verdict word as the rule gave it."""
    path = os.path.join(dirname, "verdicts.csv")
    if not (isinstance(manifest.get("grid"), dict) and manifest["grid"].get("claims")) or not os.path.exists(path):
        return []
    import csv
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        return []

    def num(t):
        try:
            v = float(t)
        except ValueError:
            return "—"
        return f"{v:+.4g}"

    cls = {"supported": "ok", "contradicted": "bad", "unresolved": "warn"}
    out = ["<h2>Claims and verdicts</h2><p class=\"note\">Each claim declared in the grid, decided by "
           "<code>attnsweep verdict</code>'s rule (docs/verdicts.md): the estimate over every unit, its 95 % "
           "interval by a bootstrap over units (widened for few units), and the verdict word: supported, "
           "contradicted, unresolved (the interval spans the claim's threshold, margin or tolerance) or not "
           "testable. Declared " + html.escape(rows[0].get("declared", "")) + ".</p>",
           "<div class=\"card\"><table><thead><tr>" + "".join(
               f"<th>{h}</th>" for h in ("claim", "statement", "metric", "target", "units", "estimate [95 %]",
                                         "verdict", "why / warnings")) + "</tr></thead><tbody>"]
    for r in rows:
        word = r.get("verdict", "")
        why = "; ".join(x for x in (r.get("reason", ""), r.get("warnings", "")) if x)
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in (
            f"<code>{html.escape(r.get('claim', ''))}</code>", html.escape(r.get("statement", "")),
            html.escape(r.get("metric", "")), html.escape(r.get("target", "")), html.escape(r.get("units", "")),
            f"{num(r.get('estimate', ''))} [{num(r.get('ci_lo', ''))}, {num(r.get('ci_hi', ''))}]",
            f'<span class="verdict {cls.get(word, "")}">{html.escape(word)}</span>', html.escape(why))) + "</tr>")
    out.append("</tbody></table></div>")
    return out


def main():
    if len(sys.argv) != 5:
        die("usage: plot.py DIR VERSION REGISTRY_JSON RESULT_SCHEMA_JSON")
    dirname, version = sys.argv[1], sys.argv[2]
    set_registry(json.loads(sys.argv[3]))
    set_schema(json.loads(sys.argv[4]))
    data = load(dirname)
    manifest = read_json(os.path.join(dirname, "manifest.json"))
    status = read_json(os.path.join(dirname, "status.json"))
    groups = Groups(data)
    rep = Report(data, groups)
    for make in (rep.norms_vs_n, rep.norm_trajectories, rep.accuracy_vs_n, rep.concentration, rep.paired,
                 rep.best_scale, rep.loss_curves):
        make()
    table, table_rows = rep.table()

    st = data["cells"].get("status", np.array([], dtype=object))
    complete = int(sum(1 for s in st if s == "complete"))
    diverged = int(sum(1 for s in st if s == "diverged"))
    ids = set(data["cells"].get("cell_id", []))
    failed = [f for f in status.get("failed_cells", []) if f.get("cell_id") not in ids]
    total = int(manifest.get("cells", data["n"] + len(failed)))
    pending = max(0, total - complete - diverged - len(failed))
    grid = manifest.get("grid_name") or os.path.basename(os.path.abspath(dirname))
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    def constant_text(k, v):
        # a command cell's `command` is the whole section as JSON: its program line says it
        if k == "command":
            try:
                return "command=" + " ".join(json.loads(v)["argv"])
            except (ValueError, KeyError, TypeError):
                pass
        return f"{k}={value_text(v)}"
    const = ", ".join(constant_text(k, v) for k, v in groups.constant)

    def stat(n, label, cls=""):
        return f'<div class="stat {cls}"><b>{n}</b><span>{label}</span></div>'

    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>attnsweep report: {html.escape(grid)}</title><style>{CSS}</style></head><body>",
        '<header><div class="wrap">',
        f'<h1>attnsweep report · <span class="grid">{html.escape(grid)}</span></h1>',
        f'<div class="sub">attnsweep {html.escape(version)}'
        + (f" (grid run with {html.escape(str(manifest['attnsweep_version']))})"
           if manifest.get("attnsweep_version") and manifest.get("attnsweep_version") != version else "")
        + f" · generated {now} · {html.escape(os.path.abspath(dirname))}</div>",
    ]
    if manifest.get("grid_hash"):
        parts.append(f'<div class="sub">grid hash {html.escape(str(manifest["grid_hash"]))}'
                     + (f" · state: {html.escape(str(status['state']))}" if status.get("state") else "") + "</div>")
    if const:
        parts.append(f'<div class="sub">every cell: {html.escape(const)}</div>')
    parts.append('<div class="stats">' + stat(total, "cells") + stat(complete, "complete", "ok")
                 + stat(diverged, "diverged", "warn" if diverged else "") + stat(len(failed), "failed", "bad" if failed else "")
                 + (stat(pending, "pending") if pending else "") + stat(len(rep.figures), "figures") + "</div>")
    parts.append("</div></header><main><div class=\"wrap\">")
    parts.extend(verdicts_section(dirname, manifest))
    if not rep.figures:
        parts.append('<p class="note">No figure applies to these cells yet (no prompt-length axis, metrics or '
                     'trajectories that the report knows how to plot).</p>')
    for k, (title, caption, png, plotted) in enumerate(rep.figures, 1):
        # what the figure plots (point counts, legend slopes) as JSON, for tests and scripts
        parts.append(f"<h2>Figure {k}. {html.escape(title)}</h2>"
                     f"<figure data-plotted=\"{html.escape(json.dumps(plotted, ensure_ascii=False), quote=True)}\">"
                     f'<img alt="{html.escape(title)}" src="data:image/png;base64,{png}">'
                     f"<figcaption><b>Figure {k}.</b> {html.escape(caption)}</figcaption></figure>")
    if table:
        per = "per group of cells and prompt length N" if rep.N is not None else "per group of cells"
        parts.append("<h2>Final metrics</h2><p class=\"note\">Mean ± standard deviation over seeds of every "
                     f"/final metric, {per} (complete cells only; diverged cells are counted beside the "
                     "seeds).</p>")
        parts.append(f'<div class="card">{table}</div>')
    if failed:
        parts.append("<h2>Failed cells</h2><ul class=\"skipped\">" + "".join(
            f"<li>{html.escape(str(f.get('cell_id')))}{html.escape(swept_words(f))}: "
            f"{html.escape(str(f.get('reason', '')))}</li>" for f in failed) + "</ul>")
    if data["skipped"]:
        parts.append("<h2>Files left out by aggregate</h2><ul class=\"skipped\">"
                     + "".join(f"<li>{html.escape(s)}</li>" for s in data["skipped"]) + "</ul>")
    parts.append(f'<footer>Made by <code>attnsweep report</code> from aggregate.h5 ({data["n"]} cells); '
                 "figures are embedded, the page needs no other file.</footer></div></main></body></html>")

    out = os.path.join(dirname, "report.html")
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)
    print(f"figures: {len(rep.figures)}")
    print(f"table rows: {table_rows}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
