#!/usr/bin/env bash
# Paper B's paired cells on this machine's CPUs, in one run: cells per hour of
# paperB_icl_paired_cpu.json's cells (1500 SGD steps, batch 128, L = 10, 40, 160, 640,
# softmax and linear) by a baseline binary (BASE: attnsweep built at b86830b, the last
# commit before the read-out's own algebra and the Philox prompts) and by this build, one
# cell a process (--fuse 1) and in fused groups (the default), whose result files must be
# identical;
# then the prompt generator's normals per second against numpy and the memory bandwidth
# (bench/normals).
#
# usage: bench/paperB_cpu.sh [INIT_SEEDS] [DATA_SEEDS]
#   INIT_SEEDS, DATA_SEEDS: how many of the grid's 8 initialisations and 3 data seeds to run
#   (default 1 and 1: 8 cells, every L and both activations; 8 3 is the whole grid)
#   BASE=path/to/old/attnsweep (skipped when unset), BUILD=build dir (default ./build),
#   WORKERS (default 2), KEEP=1 keeps the run directories.
# A baseline binary, built here in a few minutes (the CPU path only):
#   git worktree add /tmp/base b86830b && cmake -S /tmp/base -B /tmp/base/build -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=OFF && cmake --build /tmp/base/build --target attnsweep
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
build="${BUILD:-$root/build}"
ours="$build/attnsweep"
workers="${WORKERS:-2}"
ninit="${1:-1}" ndata="${2:-1}"
[[ -x "$ours" ]] || { echo "paperB_cpu.sh: $ours not built" >&2; exit 2; }
tmp="$(mktemp -d)"
[[ "${KEEP:-0}" == 1 ]] || trap 'rm -rf "$tmp"' EXIT

# The grid with its first INIT_SEEDS initialisations and DATA_SEEDS data seeds.
/usr/bin/python3 - "$root/experiments/grids/paperB_icl_paired_cpu.json" "$tmp/grid.json" "$ninit" "$ndata" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
g["name"] += "_bench"
g["axes"]["init_seed"] = g["axes"]["init_seed"][: int(sys.argv[3])]
g["axes"]["seed"] = g["axes"]["seed"][: int(sys.argv[4])]
json.dump(g, open(sys.argv[2], "w"), indent=1)
PY
cells=$("$ours" plan "$tmp/grid.json" --json | /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)["cells"]))')
echo "# $cells cells of paperB_icl_paired_cpu ($ninit initialisations x $ndata data seeds), --workers $workers," \
     "$(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

# Wall seconds of one `run` of the grid into a fresh directory (extra arguments: run's).
wall_of() {
  local bin="$1" out="$2" t0 t1
  shift 2
  t0=$(date +%s.%N)
  "$bin" run "$tmp/grid.json" --out "$out" --workers "$workers" "$@" >"$out.log" 2>&1 ||
    { echo "paperB_cpu.sh: $bin run failed (log $out.log)" >&2; tail -5 "$out.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.1f", $2 - $1}'
}
per_hour() { echo "$1 $2" | awk '{printf "%.0f", $1 / $2 * 3600}'; }

ratio() { echo "$1 $2" | awk '{printf "%.1f", $1 / $2}'; }
if [[ -n "${BASE:-}" ]]; then
  base_s=$(wall_of "$BASE" "$tmp/base")
  printf "%-40s %8s s  %8s cells/h\n" "baseline (BASE, one cell a process)" "$base_s" "$(per_hour "$cells" "$base_s")"
fi
alone_s=$(wall_of "$ours" "$tmp/alone" --fuse 1)
printf "%-40s %8s s  %8s cells/h\n" "this build, --fuse 1 (per-cell path)" "$alone_s" "$(per_hour "$cells" "$alone_s")"
fused_s=$(wall_of "$ours" "$tmp/fused")
printf "%-40s %8s s  %8s cells/h\n" "this build, fused groups (default)" "$fused_s" "$(per_hour "$cells" "$fused_s")"
if [[ -n "${BASE:-}" ]]; then
  echo "less wall time than the baseline: per-cell path $(ratio "$base_s" "$alone_s")x, fused groups $(ratio "$base_s" "$fused_s")x"
else
  echo "baseline: skipped (BASE unset)"
fi
echo "fused groups / per-cell path: $(ratio "$alone_s" "$fused_s")x less wall time"
if /usr/bin/python3 "$root/scripts/compare_results.py" "$tmp/alone" "$tmp/fused" >/dev/null; then
  echo "fused and per-cell result files: identical"
else
  echo "fused and per-cell result files: DIFFERENT"; exit 1
fi
echo
if [[ -x "$build/bench/normals" ]]; then
  "$build/bench/normals"
else
  echo "bench/normals: not built"
fi
