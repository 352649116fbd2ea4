#!/usr/bin/env bash
# No source file includes a higher layer (tests/integration/include_layers.py), and the
# check itself catches a planted violation.
source "$(dirname "$0")/lib.bash"
check "the checker reports a planted violation" $PY "$SRC/tests/integration/include_layers.py" --self-test
check "no layer includes a higher one" $PY "$SRC/tests/integration/include_layers.py" "$SRC"
