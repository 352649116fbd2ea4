# Shared by the integration tests (sourced). Each test runs in its own scratch folder
# and fails loudly: set -e, and `check` prints what was expected.
set -euo pipefail
: "${ATTNSWEEP:?set by ctest: path to the attnsweep binary}"
: "${SRC:?set by ctest: the source tree}"
PY=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
WORK=$(mktemp -d /tmp/attnsweep-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }
check() {  # check "description" command...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else fail "$what"; fi
}
# Runs a command, stores its exit code in RC and stderr in ERR (never aborts).
run_rc() {
  set +e
  "$@" 2>"$WORK/.stderr" >"$WORK/.stdout"
  RC=$?
  set -e
  ERR=$(cat "$WORK/.stderr")
  OUT=$(cat "$WORK/.stdout")
}
# results_valid DIR [killed]: every file under DIR/runs is a complete result named by its
# cell_id. With `killed` (after a SIGKILL of writers: a lost host, a killed rank), a writer's
# temporary CELL.h5.tmp.PID may be there too, since a killed writer cannot remove its own; it
# is never read as a result, and the next run removes it (valid_and_once checks that).
results_valid() {
  $PY - "$1" "${2:-}" <<'PY'
import glob, os, re, sys, h5py
temporaries = 0
for f in glob.glob(sys.argv[1] + "/runs/*"):
    if sys.argv[2] == "killed" and re.fullmatch(r"[0-9a-f]{16}\.h5\.tmp\.[0-9]+", os.path.basename(f)):
        temporaries += 1
        continue
    assert f.endswith(".h5"), f"unexpected file {f}"
    with h5py.File(f) as h:
        assert h.attrs["status"] == "complete" and f.endswith(h.attrs["cell_id"] + ".h5"), f
if temporaries:
    print(f"{temporaries} temporary result file(s) of a killed writer, left for the rerun to remove")
PY
}
count_events() {  # count_events DIR EVENT: lines of that event since the last sweep_started
  $PY - "$1/events.jsonl" "$2" <<'PY'
import json, sys
lines = []
for l in open(sys.argv[1]):
    try:
        lines.append(json.loads(l))
    except ValueError:
        pass  # a line torn by a full disk or a kill -9
last = max(i for i, e in enumerate(lines) if e["event"] == "sweep_started")
print(sum(1 for e in lines[last:] if e["event"] == sys.argv[2]))
PY
}
# command_test_setup: for the command task's tests (command_*.sh): the cells' scratch
# directories under $WORK/tmp (a killed attempt's stays there), OUT_DIR and PROG, the
# test program tests/integration/command_prog.py.
command_test_setup() {
  export TMPDIR=$WORK/tmp OUT_DIR=$WORK
  mkdir -p "$TMPDIR"
  PROG=$SRC/tests/integration/command_prog.py
}
