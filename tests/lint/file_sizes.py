"""Every production source file over 600 lines says at its top why it is one file
(docs/architecture.md): a line "About N lines: <why>" among its first 15 lines, with N
within 15 % of its length. tests/ and bench/ are not production code.

usage: file_sizes.py ROOT          check the tree; exit 1 naming each file
       file_sizes.py --self-test   plant a long file without its line, expect it caught
"""
import os
import re
import sys
import tempfile

LIMIT = 600
FOLDERS = ["base", "kernels", "experiments", "worker", "results", "coordinator", "slurm", "app", "emulator"]
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".py", ".in")
ABOUT = re.compile(r"About (\d+) lines: \S")


def problems(root):
    out = []
    for top in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith(SOURCES):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    lines = f.read().split("\n")
                n = len(lines) - (lines[-1] == "")
                if n <= LIMIT:
                    continue
                rel = os.path.relpath(path, root)
                said = [int(m.group(1)) for m in (ABOUT.search(l) for l in lines[:15]) if m]
                if not said:
                    out.append(f"{rel}: {n} lines, over {LIMIT}, and its top does not say why it is one file "
                               "(expected a line \"About N lines: why\" among its first 15)")
                elif abs(said[0] - n) > 0.15 * n:
                    out.append(f"{rel}: {n} lines, but its top says about {said[0]} (expected within 15 %)")
    return out


def main(argv):
    if argv == ["--self-test"]:
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "worker"))
            with open(os.path.join(tmp, "worker", "long.cpp"), "w") as f:
                f.write("// a long file\n" + "int x;\n" * 700)
            with open(os.path.join(tmp, "worker", "said.cpp"), "w") as f:
                f.write("// About 700 lines: one state machine.\n" + "int x;\n" * 700)
            with open(os.path.join(tmp, "worker", "stale.cpp"), "w") as f:
                f.write("// About 300 lines: one state machine.\n" + "int x;\n" * 700)
            p = problems(tmp)
        ok = len(p) == 2 and "long.cpp" in p[0] and "stale.cpp" in p[1]
        print(("ok: " if ok else "FAIL: ") + "a long file without its line and one with a stale count are "
              "reported, one that says why is not: " + "; ".join(p))
        return 0 if ok else 1
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    p = problems(argv[0])
    for line in p:
        print(line)
    print(f"file sizes: {len(p)} problems")
    return 1 if p else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
