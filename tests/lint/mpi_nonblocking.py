#!/usr/bin/env python3
"""No MPI call that waits on another rank during the sweep (issue: a host that freezes).

Rank 0 and every rank's loop exchange messages through coordinator/messages.cpp's Outbox
and Inbox only (MPI_Isend, MPI_Improbe, MPI_Imrecv, MPI_Test): a frozen or unreachable
peer can never hold them up. This check fails on any blocking point-to-point call or wait
in a source file of the coordinator, worker or app (a call in a comment does not count).
The setup's collectives before any cell runs (MPI_Allreduce, MPI_Bcast, MPI_Gather: every
rank must take part in them anyway) and MPI_Init/MPI_Finalize are not point-to-point and
are allowed.

    mpi_nonblocking.py ROOT          check the tree
    mpi_nonblocking.py --self-test   plant each blocking call in a scratch file, expect it caught
"""
import os
import re
import sys
import tempfile

import linter

BLOCKING = ["MPI_Send", "MPI_Ssend", "MPI_Bsend", "MPI_Rsend", "MPI_Recv", "MPI_Mrecv", "MPI_Sendrecv",
            "MPI_Sendrecv_replace", "MPI_Probe", "MPI_Mprobe", "MPI_Wait", "MPI_Waitall", "MPI_Waitany",
            "MPI_Waitsome"]
CALL = re.compile(r"\b(" + "|".join(BLOCKING) + r")\s*\(")
DIRS = ["coordinator", "worker", "app", "experiments", "results", "slurm", "base"]


def code_of(text):
    """The text without // and /* */ comments and string literals (lines kept)."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)
    return re.sub(r"//[^\n]*", "", text)


def violations(root):
    """(the number of files checked, a line per blocking call)"""
    checked, found = 0, []
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                checked += 1
                with open(path, encoding="utf-8") as fh:
                    for n, line in enumerate(code_of(fh.read()).splitlines(), 1):
                        for m in CALL.finditer(line):
                            found.append(f"{os.path.relpath(path, root)}:{n}: {m.group(1)} waits on another rank "
                                         "(use coordinator/messages.h Outbox/Inbox)")
    return checked, found


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "coordinator"))
        path = os.path.join(root, "coordinator", "x.cpp")
        for call in BLOCKING:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(f"// {call}( in a comment is fine\nvoid f() {{ {call} (buf, 1, MPI_CHAR, 0, 1, comm); }}\n")
            _, v = violations(root)
            if len(v) != 1 or call not in v[0] or ":2:" not in v[0]:
                print(f"self-test: a planted {call} gave {v}", file=sys.stderr)
                return 1
        with open(path, "w", encoding="utf-8") as fh:
            fh.write('void f() { MPI_Isend(b, 1, MPI_CHAR, 0, 1, c, &r); MPI_Test(&r, &d, s); log("MPI_Send("); }\n')
        _, v = violations(root)
        if v:
            print(f"self-test: non-blocking calls reported: {v}", file=sys.stderr)
            return 1
    print(f"self-test: each of {len(BLOCKING)} planted blocking calls caught; comments, strings and Isend/Test not")
    return 0


def check(root):
    files, v = violations(root)
    if files == 0:
        v = v + [f"no source file under {root}"]
    return v, f"mpi nonblocking: {files} files, {len(v)} blocking point-to-point MPI calls or waits in " + ", ".join(DIRS)


if __name__ == "__main__":
    sys.exit(linter.main(sys.argv[1:], __doc__, check, self_test))
