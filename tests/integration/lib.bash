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
