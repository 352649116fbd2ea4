"""The layers of the source tree, lowest first: a file may include its own folder and the
folders below it, never one above (docs/architecture.md):

    base <- kernels <- experiments <- {worker, results} <- coordinator <- slurm <- app

base/ holds the utilities every layer uses (atomic file writes, the kinds of error, process-start CPU settings,
SHA-256, child processes, the clock as text).

worker/ and results/ stand side by side, and neither includes the other: worker/ trains
(run_cell returns a cell's result), results/ writes, reads and aggregates result files,
and what a result holds (experiments/cell_result.h) lies below both;
coordinator/train_command hands the one to the other. tests/ and bench/ may include
anything.

worker/ is two rooms: worker/model/ (the model's layout, the model, the backends) below
worker/training/ (trainer, cell loop, groups, checkpoints, the cell driver on top). In
both, the CUDA files (a name with "cuda": backend_cuda, cuda_trainer) sit above the
generic ones: a generic file never includes a CUDA one.

Inside worker/model/, worker/training/, coordinator/ and results/ the files stand on
floors (FLOORS below, lowest first): a file includes only files of lower floors of its
own folder, never one of its own floor or above, and every file stands on a floor.

Across the whole tree no circle of modules remains: a module is a file with its header
(x.h, x.cpp; x.cuh, x.cu) and its templates' definitions (x_impl.h), and no module
includes, through any chain, one that includes it back.

The environment is read in one place: no source file of the layers calls getenv but
base/options.h, the options module (its typed toggles and launcher_env). The emulated
device (emulator/) reads its own variables, as a CUDA driver does.

The activation is parsed in one place: no source file of the layers turns a name into the
registry's type (a call of activation_from_name or scale_from_name, a string compared
with an activation's name) but kernels/activation.h, the registry and its two readers
(parse_activation_spec, strict; look_up_activation, lenient).

usage: include_layers.py ROOT          check the tree; exit 1 naming each violation
       include_layers.py --self-test   plant each kind of violation in a scratch tree, expect it caught
"""
import os
import re
import sys
import tempfile

import linter

TIERS = [["base"], ["kernels"], ["experiments"], ["worker", "results"], ["coordinator"], ["slurm"], ["app"]]
LAYERS = [d for tier in TIERS for d in tier]
RANK = {d: i for i, tier in enumerate(TIERS) for d in tier}
STACK = " <- ".join("{" + ", ".join(t) + "}" if len(t) > 1 else t[0] for t in TIERS)
# Checked for circles but not ranked: the emulated CUDA device (linked below kernels/).
OTHER_SOURCES = ["emulator"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/([^"]*)"')
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".in")
GETENV = re.compile(r"\bgetenv\s*\(")
OPTIONS_MODULE = "base/options.h"
ACTIVATION_PARSER = "kernels/activation.h"
NAME_LOOKUP = re.compile(r"\b(activation_from_name|scale_from_name)\s*\(")
REGISTERED_NAME = re.compile(r'static constexpr const char\* name = "([a-z0-9_]+)";')

# The floors of each room, lowest first (modules: a file's name without its extension).
FLOORS = {
    "worker/model": [
        ["backend"],          # the ModelBackend concept and the CPU backend
        ["model_layout"],     # the model's declared buffers
        ["device_memory"],    # the CUDA backend's declared buffers beside the model's
        ["backend_cuda"],     # the CUDA backend
        ["model", "gpu_memory"],  # the model over a backend; the GPU memory estimate
    ],
    "worker/training": [
        ["train_config", "prefetch", "progress"],
        ["trainer"],           # the step, the optimiser, the schedule
        ["checkpoint"],        # save / resume a trainer's state
        ["cell_loop"],         # one cell's loop: batches, logs, evals, checkpoints
        ["cell_group_loop"],   # alike cells in lockstep
        ["train_cell"],        # the cell driver: one cell or a group, CPU or CUDA
        ["cuda_trainer", "cell_group", "run_cell"],  # the CUDA instantiation; a group's rendezvous; a cell's run
    ],
    "coordinator": [
        ["run_options", "messages", "rundir", "scheduler", "liveness", "wakeup", "gpu_binding"],
        ["json_text", "heartbeat", "shared_dir"],
        ["grid"],
        ["grid_schema", "fusion", "local_slots", "resume", "status", "train_command"],
        ["run_plan"],  # the cells' costs, groups, slots and GPU fit, computed once
        ["sweep"],
    ],
    "results": [
        ["h5", "aggregate_options", "run_manifest", "report_script", "plot_script", "stats", "tfevents"],  # plot_script.h.in: the report's script, generated; tfevents: TensorBoard's file format
        ["cell_file", "table", "trajectory_metric"],
        ["aggregate_rows", "best_scale", "cell_reader", "claims"],
        ["fits", "verdict", "export_tensorboard"],  # export_tensorboard: cells as TensorBoard runs
        ["verdict_files"],
        ["aggregate_index", "paired"],
        ["aggregate"],
    ],
}


def module(path):
    stem = os.path.splitext(path[:-len(".in")] if path.endswith(".in") else path)[0]
    return stem[:-len("_impl")] if stem.endswith("_impl") else stem


def source_files(root):
    for top in LAYERS + OTHER_SOURCES:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def includes(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield lineno, m.group(1), m.group(2)


def getenv_calls(root, rel):
    """Lines of rel that call getenv (comments aside), unless rel may."""
    if rel == OPTIONS_MODULE or rel.split("/")[0] not in RANK:
        return
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            if GETENV.search(line.split("//")[0]):
                yield lineno


def activation_names(root):
    """The activations' names, as the registry declares them (none in a scratch tree)."""
    path = os.path.join(root, ACTIVATION_PARSER)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return REGISTERED_NAME.findall(f.read())


def name_comparison(names):
    """A string compared with one of `names` (None when there are none)."""
    if not names:
        return None
    alternatives = "|".join(re.escape(n) for n in names)
    return re.compile(rf'(==|!=)\s*"({alternatives})"|"({alternatives})"\s*(==|!=)')


def activation_parses(root, rel, compared):
    """Lines of rel that parse an activation's name (comments aside), unless rel may."""
    if rel == ACTIVATION_PARSER or rel.split("/")[0] not in RANK:
        return
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        for lineno, line in enumerate(f, 1):
            code = line.split("//")[0]
            if NAME_LOOKUP.search(code) or (compared and compared.search(code)):
                yield lineno


def floor_of(rel):
    room = os.path.dirname(rel)
    if room not in FLOORS:
        return room, None
    name = os.path.basename(module(rel))
    for k, floor in enumerate(FLOORS[room]):
        if name in floor:
            return room, k
    return room, -1


def circles(graph):
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def violations(root):
    out, files, graph = [], 0, {}
    compared = name_comparison(activation_names(root))
    for rel in source_files(root):
        files += 1
        top = rel.split("/")[0]
        name = os.path.basename(rel)
        mod = module(rel)
        graph.setdefault(mod, set())
        room, floor = floor_of(rel)
        if floor == -1:
            out.append(f"{rel}: stands on no floor of {room}/ (add {os.path.basename(mod)} to FLOORS in "
                       f"tests/lint/include_layers.py and to docs/architecture.md)")
        for lineno in getenv_calls(root, rel):
            out.append(f"{rel}:{lineno}: calls getenv: the environment is read in {OPTIONS_MODULE} only "
                       "(a typed accessor for an ATTNSWEEP_* toggle, launcher_env for what others set)")
        for lineno in activation_parses(root, rel, compared):
            out.append(f"{rel}:{lineno}: parses an activation's name: it is parsed in {ACTIVATION_PARSER} only "
                       "(parse_activation_spec for a spec, look_up_activation for a label or one key)")
        for lineno, layer, path in includes(root, rel):
            target = f"{layer}/{path}"
            if module(target) != mod:
                graph[mod].add(module(target))
            where = f"{rel}:{lineno}"
            if top in RANK and layer in RANK and RANK[layer] > RANK[top]:
                out.append(f"{where}: {top}/ includes {layer}/, a higher layer ({STACK})")
                continue
            if top in RANK and layer in RANK and RANK[layer] == RANK[top] and layer != top:
                out.append(f"{where}: {top}/ includes {layer}/, a layer beside it ({STACK})")
                continue
            if top == "worker" and layer == "worker" and "cuda" in path and "cuda" not in name:
                out.append(f"{where}: {name}, a generic file, includes worker/{path}, a CUDA one "
                           "(only worker/**/*cuda* may)")
            if room == "worker/model" and target.startswith("worker/training/"):
                out.append(f"{where}: worker/model/ includes {target}, of the training room above it")
            troom, tfloor = floor_of(target)
            if floor is not None and floor >= 0 and troom == room and tfloor is not None and tfloor >= 0 \
                    and module(target) != mod and tfloor >= floor:
                out.append(f"{where}: {rel} (floor {floor} of {room}/) includes {target} (floor {tfloor}): "
                           "a file includes only lower floors of its room")
    for comp in circles(graph):
        out.append("a circle of modules (each includes the next, through its header or source): " + " -> ".join(comp))
    return files, out


def self_test():
    plants = {
        "worker/training/x.cpp": '#include "results/cell_file.h"\n',
        "results/y.cpp": '#include "worker/training/run_cell.h"\n#include "coordinator/grid.h"\n',
        "worker/model/model.cpp": '#include "worker/model/cuda_thing.h"\n#include "worker/training/trainer.h"\n',
        "worker/training/trainer.cpp": '#include "worker/training/run_cell.h"\n',
        "coordinator/grid.cpp": '#include "coordinator/json_text.h"\n',
        "coordinator/json_text.cpp": '#include "coordinator/grid.h"\n',
        "kernels/a.h": '#include "kernels/b.h"\n',
        "kernels/b.cpp": '#include "kernels/b.h"\n#include "kernels/a.h"\n',
        "kernels/b.h": "",
        "worker/model/backend.cpp": 'const char* v = std::getenv("ATTNSWEEP_X");  // getenv( in a comment is fine\n',
        "base/options.h": 'inline const char* get(const char* n) { return std::getenv(n); }\n',
        "kernels/activation.h": 'struct Relu { static constexpr const char* name = "relu"; };\n'
                                'auto a = detail::activation_from_name(n);\nbool r = n == "relu";\n',
        "results/table.cpp": 'auto a = activation_from_name(s);  // activation_from_name( in a comment is fine\n'
                             'auto k = look_up_activation(s);\nif (act != "relu") return;\n',
    }
    want = [
        "worker/training/x.cpp:1: worker/ includes results/, a layer beside it",
        "results/y.cpp: stands on no floor",
        "results/y.cpp:1: results/ includes worker/, a layer beside it",
        "results/y.cpp:2: results/ includes coordinator/, a higher layer",
        "worker/training/x.cpp: stands on no floor",
        "worker/model/model.cpp:1: model.cpp, a generic file, includes worker/model/cuda_thing.h",
        "worker/model/model.cpp:2: worker/model/ includes worker/training/trainer.h",
        "worker/training/trainer.cpp:1: worker/training/trainer.cpp (floor 1 of worker/training/) includes",
        "coordinator/json_text.cpp:1: coordinator/json_text.cpp (floor 1 of coordinator/) includes coordinator/grid.h",
        "a circle of modules (each includes the next, through its header or source): kernels/a -> kernels/b",
        "coordinator/grid -> coordinator/json_text",
        "worker/model/backend.cpp:1: calls getenv",
        "results/table.cpp:1: parses an activation's name",
        "results/table.cpp:3: parses an activation's name",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in plants.items():
            os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(tmp, rel), "w") as f:
                f.write(text)
        _, v = violations(tmp)
    missing = [w for w in want if not any(w in line for line in v)]
    ok = not missing and len(v) == len(want)
    print(("ok: " if ok else "FAIL: ") + f"{len(want)} planted violations (an upward layer, a layer beside, a file on no floor, a "
          "generic file including a CUDA one, the model room including the training room, an include of a "
          "higher floor, two circles of modules, a getenv outside the options module, two parses of an activation's "
          "name outside its parser) are reported, and nothing else")
    for line in v:
        print("  reported: " + line)
    for w in missing:
        print("  NOT reported: " + w)
    return 0 if ok else 1


def check(root):
    files, v = violations(root)
    if files == 0:
        v = v + [f"no source file under {root}"]
    return v, f"include layers: {files} files, {len(v)} violations"


if __name__ == "__main__":
    sys.exit(linter.main(sys.argv[1:], __doc__, check, self_test))
