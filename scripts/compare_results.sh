#!/usr/bin/env bash
# Runs the small example grids with two attnsweep binaries and compares every dataset of
# every result file (scripts/compare_results.py: times and host aside). For a change that
# must not change behaviour (a refactor): BASE is the binary of the change's base.
#
#   scripts/compare_results.sh BASE_BINARY NEW_BINARY [WORKDIR]
#   scripts/compare_results.sh --rev GIT_REV NEW_BINARY [WORKDIR]   (builds GIT_REV, CPU only)
#
# Exit 0: every grid identical (and a planted one-bit change is caught); 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ "${1:-}" = "--rev" ]; then
  rev=$2; shift 2
  src=$(mktemp -d /tmp/attnsweep-base.XXXXXX)
  git worktree add -q --detach "$src" "$rev"
  cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=OFF >/dev/null
  cmake --build "$src/build" -j "$(nproc)" --target attnsweep >/dev/null
  set -- "$src/build/attnsweep" "$@"
fi
BASE=$(realpath "$1"); NEW=$(realpath "$2"); WORK=${3:-$(mktemp -d /tmp/compare_results.XXXXXX)}
mkdir -p "$WORK"
GRIDS=(norm_probe paperA_fmnist_small paperA_scale_sweep_small paperB_concentration_small
       paperB_icl_small lra_listops_small paperA_pde_small)
PY=/usr/bin/python3
status=0
for g in "${GRIDS[@]}"; do
  for side in base new; do
    bin=$BASE; [ $side = new ] && bin=$NEW
    rm -rf "$WORK/$side/$g"
    t0=$(date +%s.%N)
    "$bin" run "experiments/grids/$g.json" --out "$WORK/$side/$g" --workers 2 >"$WORK/$g.$side.log" 2>&1 ||
      { echo "compare_results: $g: the $side binary failed (log: $WORK/$g.$side.log)"; status=1; }
    printf 'compare_results: %-28s %s %6.1f s\n' "$g" "$side" "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')"
  done
  plant=; [ "$g" = "${GRIDS[0]}" ] && plant=--plant
  $PY "$ROOT/scripts/compare_results.py" $plant "$WORK/base/$g" "$WORK/new/$g" || status=1
done
[ $status = 0 ] && echo "compare_results: all ${#GRIDS[@]} grids identical" || echo "compare_results: DIFFERENCES (see above)"
exit $status
