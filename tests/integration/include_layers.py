"""The layers of the source tree, lowest first: a file may include its own folder and the
folders below it, never one above (docs/architecture.md):

    base <- kernels <- experiments <- worker <- results <- coordinator <- slurm <- app

base/ holds the utilities every layer uses (atomic file writes, process-start CPU settings,
SHA-256, child processes).

results/ (result files, aggregate, report) sits above worker/: app/ and coordinator/ use
it, worker/ and below never do (run_cell returns its result; coordinator/train_command
writes it). tests/ and bench/ may include anything.

Inside worker/, the CUDA files (a name with "cuda": backend_cuda, cuda_trainer) sit above
the generic ones (model, trainer, checkpoint, cell_loop, ...): a generic file never includes
a CUDA one; the CUDA instantiations live in worker/training/cuda_trainer.cpp.

usage: include_layers.py ROOT          check the tree; exit 1 naming each violation
       include_layers.py --self-test   plant a violation in a scratch tree, expect it caught
"""
import os
import re
import sys
import tempfile

LAYERS = ["base", "kernels", "experiments", "worker", "results", "coordinator", "slurm", "app"]
RANK = {d: i for i, d in enumerate(LAYERS)}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]*)"')
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
                        elif (m and layer == "worker" and m.group(1) == "worker" and "cuda" in m.group(2)
                              and "cuda" not in name):
                            out.append(f"{os.path.relpath(path, root)}:{lineno}: worker/{name}, a generic "
                                       f"file, includes worker/{m.group(2)}, a CUDA one (only worker/*cuda* may)")
    return files, out


def main(argv):
    if argv == ["--self-test"]:
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "worker"))
            with open(os.path.join(tmp, "worker", "x.cpp"), "w") as f:
                f.write('#include "worker/x.h"\n#include "results/cell_file.h"\n#include "worker/training/cuda_trainer.h"\n')
            with open(os.path.join(tmp, "worker", "cuda_y.cpp"), "w") as f:
                f.write('#include "worker/model/backend_cuda.h"\n#include "worker/training/trainer.h"\n')
            _, v = violations(tmp)
        ok = len(v) == 2 and "worker/x.cpp:2" in v[0] and "worker/x.cpp:3" in v[1]
        print(("ok: " if ok else "FAIL: ") + "a planted worker/ -> results/ include and a generic worker/ file "
              "including a CUDA one are reported (and a CUDA file including both is not): " + "; ".join(v))
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
