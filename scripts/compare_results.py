#!/usr/bin/env python3
"""Compares the per-cell result files of two run directories dataset by dataset.

usage: compare_results.py DIR_A DIR_B            exit 0 identical, 1 different
       compare_results.py --plant DIR_A DIR_B    also proves the check can fail: flips
                                                 one bit of one dataset in a copy of
                                                 DIR_B's first file and expects a difference

Every dataset is compared byte for byte (so NaN == NaN and -0.0 != 0.0), with its dtype
and shape; every attribute of every object too, except those that describe when and
where the cell ran (VOLATILE below). The two directories must hold the same cell ids.
"""
import os
import shutil
import sys
import tempfile

import h5py
import numpy as np

# Root attributes that differ between two runs of the same cell by design.
VOLATILE = {"started", "finished", "host", "wall_seconds", "slurm_job_id", "slurm_array_task",
            "gpu_name", "gpu_uuid", "cuda_visible_devices", "attnsweep_version",
            "attempts", "last_attempt_started", "last_attempt_wall_seconds"}


def attrs_of(obj, root):
    out = {}
    for k, v in obj.attrs.items():
        if root and k in VOLATILE:
            continue
        out[k] = np.asarray(v).tobytes() if not isinstance(v, (str, bytes)) else v
    return out


def compare_files(a_path, b_path):
    problems = []
    with h5py.File(a_path, "r") as a, h5py.File(b_path, "r") as b:
        def walk(f):
            names = {"/": f}
            f.visititems(lambda n, o: names.__setitem__(n, o))
            return names
        na, nb = walk(a), walk(b)
        for n in sorted(set(na) ^ set(nb)):
            problems.append(f"{n}: only in {'A' if n in na else 'B'}")
        for n in sorted(set(na) & set(nb)):
            oa, ob = na[n], nb[n]
            if type(oa) is not type(ob):
                problems.append(f"{n}: a {type(oa).__name__} in A, a {type(ob).__name__} in B")
                continue
            if attrs_of(oa, n == "/") != attrs_of(ob, n == "/"):
                problems.append(f"{n}: attributes differ")
            if isinstance(oa, h5py.Dataset):
                if oa.dtype != ob.dtype or oa.shape != ob.shape:
                    problems.append(f"{n}: {oa.dtype}{oa.shape} in A, {ob.dtype}{ob.shape} in B")
                elif np.asarray(oa[()]).tobytes() != np.asarray(ob[()]).tobytes():
                    problems.append(f"{n}: values differ")
    return problems


def cell_files(d):
    runs = os.path.join(d, "runs")
    if not os.path.isdir(runs):
        return []
    return sorted(f for f in os.listdir(runs) if f.endswith(".h5"))


def compare_dirs(da, db):
    fa, fb = cell_files(da), cell_files(db)
    problems = [f"{f}: only in {da if f in fa else db}" for f in sorted(set(fa) ^ set(fb))]
    if not fa:
        problems.append(f"{da}: no result files")
    for f in sorted(set(fa) & set(fb)):
        problems += [f"{f} {p}" for p in compare_files(os.path.join(da, "runs", f), os.path.join(db, "runs", f))]
    return len(fa), problems


def plant(db):
    """A copy of db whose first file has one bit of its first numeric dataset flipped."""
    tmp = tempfile.mkdtemp(prefix="compare_plant_")
    shutil.copytree(os.path.join(db, "runs"), os.path.join(tmp, "runs"))
    path = os.path.join(tmp, "runs", cell_files(db)[0])
    with h5py.File(path, "r+") as f:
        target = []
        f.visititems(lambda n, o: target.append(n) if isinstance(o, h5py.Dataset) and o.dtype.kind in "fiu"
                     and o.size > 0 and not target else None)
        ds = f[target[0]]
        raw = np.array(ds[()])
        flat = raw.reshape(-1).view(np.uint8)
        flat[0] ^= 1
        ds[()] = raw
    return tmp, target[0]


def main(argv):
    do_plant = "--plant" in argv
    args = [a for a in argv if a != "--plant"]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    da, db = args
    n, problems = compare_dirs(da, db)
    for p in problems:
        print(f"compare_results: {p}")
    if problems:
        print(f"compare_results: {da} vs {db}: {len(problems)} differences over {n} files")
        return 1
    print(f"compare_results: {da} vs {db}: {n} result files, every dataset and attribute identical")
    if do_plant:
        tmp, name = plant(db)
        _, planted = compare_dirs(da, tmp)
        shutil.rmtree(tmp)
        if not planted:
            print(f"compare_results: a flipped bit in {name} went unnoticed")
            return 1
        print(f"compare_results: a flipped bit in {name} of one file is caught: {planted[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
