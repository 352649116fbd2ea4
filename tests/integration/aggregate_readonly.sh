#!/usr/bin/env bash
# `aggregate` on a directory it cannot write (#52): one line naming the directory and
# --out-dir, exit 1 (an output that could not be written), no HDF5 error stack; with
# --out-dir the aggregate goes elsewhere and equals the one written in place. Run as an
# unprivileged user (setpriv), since root writes anywhere.
source "$(dirname "$0")/lib.bash"
command -v setpriv >/dev/null || { echo "SKIPPED: no setpriv (util-linux)"; exit 77; }
chmod 755 "$WORK"
cat > g.json <<'J'
{"axes": {"task": ["norm_probe"], "activation": ["softmax", "relu"], "prompt_length": [16, 64]}, "fixed": {"samples": 2}}
J
"$ATTNSWEEP" run g.json --out d --workers 2 >/dev/null
chmod -R a+rX,a-w d
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
run_rc as_nobody "$ATTNSWEEP" aggregate d
check "a read-only DIR: exit 1 (got $RC)" test "$RC" = 1
check "one line, naming the directory and --out-dir: $ERR" bash -c \
  "test \"\$(wc -l <<<\"\$1\")\" = 1 && grep -q 'attnsweep aggregate: d: not writable (Permission denied); write the aggregate elsewhere with --out-dir OUT' <<<\"\$1\"" _ "$ERR"
check "no HDF5 error stack" bash -c "! grep -q 'HDF5-DIAG' <<<\"\$1\"" _ "$ERR"
mkdir agg && chmod 777 agg
run_rc as_nobody "$ATTNSWEEP" aggregate d --out-dir agg/out
check "--out-dir writes elsewhere (rc $RC: $ERR)" test "$RC" = 0 -a -s agg/out/summary.csv -a -s agg/out/aggregate.h5
chmod -R u+w d
"$ATTNSWEEP" aggregate d >/dev/null
check "the same summary as in place" cmp -s d/summary.csv agg/out/summary.csv
