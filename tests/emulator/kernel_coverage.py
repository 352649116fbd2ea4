#!/usr/bin/python3
"""Every __global__ kernel of the project ran on the emulated device in the tests.

usage: kernel_coverage.py SOURCE_DIR LAUNCH_LOG

SOURCE_DIR's kernels/, experiments/ and worker/ are scanned for __global__ functions;
LAUNCH_LOG (ATTNSWEEP_EMU_LAUNCH_LOG of the emulated tests: "BINARY OFFSET EXPR" per
kernel run) is resolved to function names with nm. A kernel that no test launched fails
the check, by name and file: add a test that runs it.
"""
import collections
import pathlib
import re
import subprocess
import sys


def kernels_in(src):
    found = {}
    for d in ("kernels", "experiments", "worker"):
        for p in sorted(pathlib.Path(src, d).rglob("*")):
            if p.suffix not in (".cu", ".cuh"):
                continue
            text = p.read_text()
            for m in re.finditer(r"__global__\s+void\s+", text):
                rest = re.sub(r"^__launch_bounds__\s*\([^)]*\)\s*", "", text[m.end():])
                name = re.match(r"([A-Za-z_]\w*)\s*\(", rest)
                if name:
                    found.setdefault(name.group(1), f"{p.relative_to(src)}:{text[:m.start()].count(chr(10)) + 1}")
    return found


def launched(log):
    by_binary = collections.defaultdict(set)
    for line in pathlib.Path(log).read_text().splitlines():
        parts = line.split(" ", 2)
        if len(parts) >= 2:
            by_binary[parts[0]].add(int(parts[1], 16))
    names = []
    for binary, offsets in by_binary.items():
        out = subprocess.run(["nm", "-C", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
        for row in out.splitlines():
            fields = row.split(" ", 2)
            if len(fields) == 3 and re.fullmatch(r"[0-9a-f]+", fields[0]) and int(fields[0], 16) in offsets:
                names.append(fields[2])
    return names


def main():
    src, log = sys.argv[1], sys.argv[2]
    if not pathlib.Path(log).exists():
        print(f"kernel_coverage: {log} does not exist: no emulated test launched a kernel")
        return 1
    kernels = kernels_in(src)
    ran = launched(log)
    missing = []
    for k, where in sorted(kernels.items()):
        pattern = re.compile(r"(^|[\s:])" + re.escape(k) + r"[<(]")
        if not any(pattern.search(n) for n in ran):
            missing.append(f"{k} ({where})")
    print(f"kernel_coverage: {len(kernels) - len(missing)} of {len(kernels)} __global__ kernels ran on the emulated device")
    for m in missing:
        print(f"kernel_coverage: never launched by an emulated test: {m}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
