#!/usr/bin/env bash
# No blocking point-to-point MPI call or wait on a sweep's path (tests/lint/mpi_nonblocking.py),
# and the check catches each one planted.
source "$(dirname "$0")/../integration/lib.bash"
check "the checker reports each planted blocking call" $PY "$SRC/tests/lint/mpi_nonblocking.py" --self-test
check "no rank waits on another in a send, receive, probe or wait" $PY "$SRC/tests/lint/mpi_nonblocking.py" "$SRC"
