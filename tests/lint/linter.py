"""The command line every source-tree linter of tests/lint/ shares:

    LINTER.py ROOT          check the tree; exit 1 naming each violation
    LINTER.py --self-test   plant each kind of violation in a scratch tree, expect it caught
"""
import sys


def main(argv, doc, check, self_test):
    """check(root) -> (violations, summary line); self_test() -> exit code."""
    if argv == ["--self-test"]:
        return self_test()
    if len(argv) != 1:
        print(doc, file=sys.stderr)
        return 2
    v, summary = check(argv[0])
    for line in v:
        print(line, file=sys.stderr)
    print(summary)
    return 1 if v else 0
