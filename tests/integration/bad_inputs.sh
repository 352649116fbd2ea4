# Malformed grids (the corpus in tests/bad_grids/, each with the message fragment it
# must produce) and malformed command lines: one clear line naming the path, exit 2,
# and nothing written.
source "$(dirname "$0")/lib.bash"
n=0
for g in "$SRC"/tests/bad_grids/*.json; do
  want=$(cat "${g%.json}.expect")
  base=$(basename "$g")
  cp "$g" "$base"
  for cmd in plan run; do
    extra=(); [ $cmd = run ] && extra=(--out "out_$base")
    run_rc "$ATTNSWEEP" $cmd "$base" "${extra[@]}"
    [ "$RC" = 2 ] || fail "$cmd $base: exit $RC, expected 2 (stderr: $ERR)"
    grep -qF -- "$want" <<<"$ERR" || fail "$cmd $base: expected '$want' in: $ERR"
    grep -qF -- "$base" <<<"$ERR" || fail "$cmd $base: the message does not name the file: $ERR"
    [ ! -e "out_$base" ] || fail "$cmd $base: wrote out_$base although the grid is invalid"
    [ -z "$OUT" ] || [ $cmd = plan ] && true
  done
  n=$((n + 1))
done
echo "ok: $n malformed grids rejected by plan and run with exit 2, nothing written"
check "at least 15 malformed grids" test "$n" -ge 15

cp "$SRC/experiments/grids/norm_probe.json" good.json
# command line -> fragment of the expected message
cases=(
  "run good.json|the option '--out' is required"
  "run good.json --out o --workers 0|--workers: expected an integer >= 1"
  "run good.json --out o --wrokers 2|did you mean --workers?"
  "run good.json --out o --device tpu|--device: expected auto, cpu or cuda"
  "run good.json --out o --retries -1|--retries: expected an integer >= 0"
  "run good.json --out o --timeout-s 0|--timeout-s: expected a number > 0"
  "run good.json --out o --threads abc|the argument ('abc') for option '--threads' is invalid"
  "run missing.json --out o|missing.json: cannot read file"
  "run good.json --out good.json|--out good.json: exists and is not a directory"
  "run good.json extra.json --out o|too many arguments"
  "rn good.json|unknown command (did you mean \"run\"?)"
  "plan|the option '--grid' is required"
  "train missing_cell.json --out x.h5|missing_cell.json: cannot read file"
  "train good.json --out x.h5|good.json: axes: unknown key"
  "train good.json --out x.h5 --device gpu|--device: expected cpu, cuda or cuda:N"
  "status nowhere|nowhere: no manifest.json"
  "submit good.json --out o --nodes 0 --gpus-per-node 0 --dry-run|--nodes: expected an integer >= 1"
  "submit good.json --out o --nodes 1 --gpus-per-node 0 --time 1:2:3:4 --dry-run|--time: expected HH:MM:SS"
  "submit good.json --out o --nodes 1 --dry-run|the option '--gpus-per-node' is required"
  "submit missing.json --out o --nodes 1 --gpus-per-node 0 --dry-run|missing.json: cannot read file"
  "aggregate nowhere|nowhere: no runs/ folder"
)
m=0
for c in "${cases[@]}"; do
  args=${c%%|*}; want=${c#*|}
  before=$(ls | sort | md5sum)
  run_rc "$ATTNSWEEP" $args
  [ "$RC" = 2 ] || fail "attnsweep $args: exit $RC, expected 2 (stderr: $ERR)"
  grep -qF -- "$want" <<<"$ERR" || fail "attnsweep $args: expected '$want' in: $ERR"
  [ "$(ls | sort | md5sum)" = "$before" ] || fail "attnsweep $args: wrote files"
  m=$((m + 1))
done
echo "ok: $m malformed command lines rejected with exit 2, nothing written"
