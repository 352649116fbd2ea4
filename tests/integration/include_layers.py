"""The layers of the source tree, lowest first: a file may include its own folder and the
folders below it, never one above (docs/architecture.md):

    base <- kernels <- experiments <- worker <- results <- coordinator <- slurm <- app

base/ holds the utilities every layer uses (atomic file writes, process-start CPU settings,
SHA-256).

results/ (result files, aggregate, report) sits above worker/: app/ and coordinator/ use
it, worker/ and below never do (run_cell returns its result; coordinator/train_command
writes it). tests/ and bench/ may include anything.

usage: include_layers.py ROOT          check the tree; exit 1 naming each violation
       include_layers.py --self-test   plant a violation in a scratch tree, expect it caught
"""
import os
import re
import sys
import tempfile

LAYERS = ["base", "kernels", "experiments", "worker", "results", "coordinator", "slurm", "app"]
RANK = {d: i for i, d in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".in")


def violations(root):
    out, files = [], 0
    for layer in LAYERS:
        for dirpath, _, names in os.walk(os.path.join(root, layer)):
            for name in names:
                if not name.endswith(SOURCES):
                    continue
                files += 1
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in RANK and RANK[m.group(1)] > RANK[layer]:
                            out.append(f"{os.path.relpath(path, root)}:{lineno}: {layer}/ includes "
                                       f"{m.group(1)}/, a higher layer ({' <- '.join(LAYERS)})")
    return files, out


def main(argv):
    if argv == ["--self-test"]:
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "worker"))
            with open(os.path.join(tmp, "worker", "x.cpp"), "w") as f:
                f.write('#include "worker/x.h"\n#include "results/cell_file.h"\n')
            _, v = violations(tmp)
        ok = len(v) == 1 and "worker/x.cpp:2" in v[0]
        print(("ok: " if ok else "FAIL: ") + "a planted worker/ -> results/ include is reported: " + "; ".join(v))
        return 0 if ok else 1
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    files, v = violations(argv[0])
    for line in v:
        print(line)
    print(f"include layers: {files} files, {len(v)} violations")
    return 1 if v or files == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
