#!/usr/bin/env bash
# No source file includes a higher layer, a higher floor of its room, or forms a circle of
# modules (tests/integration/include_layers.py), and the
# check itself catches a planted violation.
source "$(dirname "$0")/lib.bash"
check "the checker reports a planted violation" $PY "$SRC/tests/integration/include_layers.py" --self-test
check "no layer, room or floor includes a higher one, and no circle of modules" $PY "$SRC/tests/integration/include_layers.py" "$SRC"
