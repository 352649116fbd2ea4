#!/usr/bin/python3
"""Every Markdown document a source file names (a comment's "docs/results-schema.md",
"science.md") is in the repository, so that a reader can follow it.

usage: /usr/bin/python3 tests/lint/doc_citations.py ROOT       check the tree; exit 1 naming each
       /usr/bin/python3 tests/lint/doc_citations.py --self-test  a planted citation of a missing
                                                                        document must be caught

A name with a folder (docs/x.md) must exist at that path from the root (or beside the
file); a bare name (x.md) must be the name of some Markdown file of the repository.
Sources: *.h, *.hpp, *.cpp, *.cu, *.cuh, *.in, *.py, *.sh, *.bash, CMakeLists.txt,
outside build*/, hidden folders and bench/results/ (saved outputs).
"""
import os
import re
import sys
import tempfile

CITE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-]+\.md)\b")
SOURCES = (".h", ".hpp", ".cpp", ".cu", ".cuh", ".in", ".py", ".sh", ".bash")


def walk(root):
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if not x.startswith(".") and not x.startswith("build")
                         and os.path.join(rel, x) != os.path.join("bench", "results") and x != "__pycache__")
        for f in sorted(files):
            yield os.path.join(d, f)


def comment_of(line, hash_comments):
    """The comment part of a line: after // (C++, CUDA) or a # that starts a word (Python,
    shell, CMake); a C++ block comment's lines start with * or /*. A script's code names
    files it makes; only what a reader is sent to counts."""
    if hash_comments:
        m = re.search(r"(?:^|\s)#(?!!)", line)
        return line[m.end():] if m else ""
    i = line.find("//")
    if i >= 0:
        return line[i + 2:]
    stripped = line.lstrip()
    return stripped if stripped.startswith(("*", "/*")) else ""


def check(root):
    md = {os.path.basename(p) for p in walk(root) if p.endswith(".md")}
    problems = []
    for path in walk(root):
        if not (path.endswith(SOURCES) or os.path.basename(path) == "CMakeLists.txt") or path.endswith("doc_citations.py"):
            continue
        try:
            text = open(path, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        hash_comments = not path.endswith((".h", ".hpp", ".cpp", ".cu", ".cuh"))
        for n, line in enumerate(text.splitlines(), 1):
            for m in CITE.finditer(comment_of(line, hash_comments)):
                name = m.group(1)
                if "/" in name:
                    ok = os.path.exists(os.path.join(root, name)) or os.path.exists(
                        os.path.join(os.path.dirname(path), name))
                else:
                    ok = name in md
                if not ok:
                    problems.append(f"{os.path.relpath(path, root)}:{n}: cites {name}, which is not in the repository")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "docs"))
        open(os.path.join(t, "docs", "there.md"), "w").write("# there\n")
        open(os.path.join(t, "a.cpp"), "w").write("// see docs/there.md and there.md\n")
        assert check(t) == [], check(t)
        open(os.path.join(t, "b.h"), "w").write("// the exit codes of contract.md\n")
        open(os.path.join(t, "c.py"), "w").write("# docs/gone.md\nx = 'made.md'  # a file it makes: not a citation\n")
        found = check(t)
        assert any("b.h:1: cites contract.md" in p for p in found), found
        assert any("c.py:1: cites docs/gone.md" in p for p in found), found
    print("self-test: planted citations caught")


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        sys.exit(0)
    problems = check(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    for p in problems:
        print(p)
    print(f"document citations: {len(problems)} problems")
    sys.exit(1 if problems else 0)
