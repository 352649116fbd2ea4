#!/usr/bin/env bash
# No source file includes a higher layer, a higher floor of its room, forms a circle of
# modules or calls getenv outside base/options.h (tests/lint/include_layers.py), and
# the check itself catches a planted violation. An ATTNSWEEP_* name given to
# options::launcher_env (meant for what the launcher sets) does not compile.
source "$(dirname "$0")/../integration/lib.bash"
check "the checker reports a planted violation" $PY "$SRC/tests/lint/include_layers.py" --self-test
check "no layer, room or floor includes a higher one, no circle of modules, getenv in the options module only" \
  $PY "$SRC/tests/lint/include_layers.py" "$SRC"
foreign() {  # foreign NAME: compiles options::launcher_env("NAME")
  printf '#include "base/options.h"\nconst char* v() { return attnsweep::options::launcher_env("%s"); }\n' "$1" |
    ${CXX:-c++} -std=c++20 -fsyntax-only -I"$SRC" -x c++ - 2>"$WORK/compile.err"
}
check "launcher_env takes a variable the launcher sets (SLURM_JOB_ID)" foreign SLURM_JOB_ID
run_rc foreign ATTNSWEEP_CUDA_MMA
check "launcher_env refuses an ATTNSWEEP_* toggle at compile time" \
  test "$RC" -ne 0 -a -n "$(grep -l 'is a toggle: give it an accessor' "$WORK/compile.err")"
