# The bad-input corpus (tests/bad_inputs/): malformed grids (given to `plan` and `run`),
# cell files (given to `train`), HDF5 inputs to `attention` and bad command lines. Every
# case must exit 2 with its whole expected message on stderr (no more, no less), within
# a timeout, and write nothing (the scratch folder is unchanged: no --out DIR, no OUT.h5,
# no temporary file). All cases run; each failing one is reported by name.
# In an expectation, @FILE@ stands for the input's path, @ACTIVATIONS@ and @TASKS@ for
# the registries' names in order, "a, b, c" (@ACTIVATIONS_OR@: "a, b or c"; from
# `attnsweep activations --json` and `attnsweep schema`, so a new activation or task
# changes no expectation), @VERSION@ for the version; in commands.txt \n is a line
# break, and a final \n... stands for the usage text that follows the message.
source "$(dirname "$0")/lib.bash"
C=$SRC/tests/bad_inputs
LIMIT=${BAD_INPUT_TIMEOUT_S:-30}  # seconds per invocation: a hang is a failure, not a stall

mkdir in && cd in
mkdir grids cells
cp "$C"/grids/*.json grids/
cp "$C"/cells/*.json cells/
cp "$SRC/experiments/grids/norm_probe.json" good.json
printf '{"task": "norm_probe", "prompt_length": 16, "samples": 2}\n' >cell.json
mkdir adir
echo "not a results directory" >afile.txt
$PY "$C/attention/make_inputs.py"
# The cells used as "valid" really are: a broken fixture would make every case pass.
"$ATTNSWEEP" plan good.json >/dev/null || fail "good.json is not a valid grid"
"$ATTNSWEEP" train cell.json --out "$WORK/cell_ok.h5" 2>/dev/null || fail "cell.json is not a valid cell"
"$ATTNSWEEP" attention good.h5 --out "$WORK/attn_ok.h5" --activation softmax || fail "good.h5 is not a valid input"
rm -f "$WORK"/*.h5
ACTIVATIONS=$("$ATTNSWEEP" activations --json | $PY -c 'import json, sys; print(", ".join(a["name"] for a in json.load(sys.stdin)["activations"]))')
TASKS=$("$ATTNSWEEP" schema | $PY -c 'import json, sys; print(", ".join(json.load(sys.stdin)["$defs"]["task"]["enum"]))')
ACTIVATIONS_OR=$(sed 's/\(.*\), /\1 or /' <<<"$ACTIVATIONS")
VERSION=$("$ATTNSWEEP" --version | awk '{print $2}')
[ -n "$ACTIVATIONS" ] && [ -n "$TASKS" ] && [ -n "$VERSION" ] || fail "cannot read the registries' names or the version"
# expand FILE: an expectation (stdin) with its placeholders filled in.
expand() {
  local f=$1 line
  while IFS= read -r line || [ -n "$line" ]; do
    line=${line//@FILE@/$f}
    line=${line//@ACTIVATIONS_OR@/$ACTIVATIONS_OR}
    line=${line//@ACTIVATIONS@/$ACTIVATIONS}
    line=${line//@TASKS@/$TASKS}
    printf '%s\n' "${line//@VERSION@/$VERSION}"
  done
}

snapshot() { find . -printf '%p %y %s %T@\n' | sort; }
failures=() n=0
# check_case NAME WANT ARGS...: exit 2, stderr is WANT (or, when WANT ends with a line
# "...", begins with the lines before it), nothing written, within LIMIT; sets why to the
# reason it failed (empty: passed).
check_case() {
  local name=$1 want=$2 before after
  shift 2
  why=""
  before=$(snapshot)
  run_rc timeout -k 5 "$LIMIT" "$ATTNSWEEP" "$@"
  after=$(snapshot)
  if [ "$RC" = 124 ] || [ "$RC" = 137 ]; then why="no answer within ${LIMIT}s (hang)"
  elif [ "$RC" != 2 ]; then why="exit $RC, expected 2"
  elif [[ "$want" == *$'\n...' ]] && [[ "$ERR" != "${want%...}"* ]]; then why="expected stderr to begin with '${want%$'\n...'}'"
  elif [[ "$want" != *$'\n...' ]] && [ "$ERR" != "$want" ]; then why="expected stderr '$want'"
  elif [ "$before" != "$after" ]; then why="wrote: $(diff <(echo "$before") <(echo "$after") | grep '^[<>]' | head -3 | tr '\n' ' ')"
  fi
  n=$((n + 1))
  if [ -n "$why" ]; then
    failures+=("$name")
    echo "FAIL $name: attnsweep $*: $why; stderr: $(head -c 600 <<<"$ERR")" >&2
  fi
}

# Grids: `plan` and `run` (whose --out must not be created); the message names the file.
grids=0
for g in "$C"/grids/*.json; do
  base=$(basename "$g") want=$(expand "grids/$(basename "$g")" <"${g%.json}.expect")
  for cmd in plan run; do
    extra=(); [ $cmd = run ] && extra=(--out "out_$base")
    check_case "grids/${base%.json} ($cmd)" "$want" $cmd "grids/$base" "${extra[@]}"
  done
  grids=$((grids + 1))
done

# Cell files: `train`, whose --out must not be written.
cells=0
for c in "$C"/cells/*.json; do
  base=$(basename "$c") want=$(expand "cells/$(basename "$c")" <"${c%.json}.expect")
  check_case "cells/${base%.json}" "$want" train "cells/$base" --out "out_${base%.json}.h5"
  cells=$((cells + 1))
done

# Command lines and attention's HDF5 inputs: NAME | ARGS | MESSAGE.
lines=0
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  name=$(sed 's/ *|.*//' <<<"$line")
  args=$(cut -d'|' -f2 <<<"$line" | sed 's/^ *//; s/ *$//')
  want=$(cut -d'|' -f3- <<<"$line" | sed 's/^ *//; s/ *$//' | expand "" )
  want=${want//\\n/$'\n'}
  read -ra argv <<<"$args"
  check_case "commands/$name" "$want" "${argv[@]}"
  lines=$((lines + 1))
done <"$C/commands.txt"

echo "bad inputs: $grids grids (x plan, run), $cells cell files, $lines command lines and attention inputs: $n invocations"
if [ ${#failures[@]} -gt 0 ]; then
  printf 'FAILED: %s\n' "${failures[@]}" >&2
  fail "${#failures[@]} of $n bad-input invocations did not exit 2 with their message and nothing written"
fi
check "at least 40 cases" test $((grids + cells + lines)) -ge 40
echo "ok: every bad input rejected with exit 2 and its whole message, nothing written"
