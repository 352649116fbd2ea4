#!/usr/bin/env bash
# attnsweep aggregate at scale: 10,000 result files of 1,000 logged steps with 4 layers
# x 4 heads (written by bench/aggregate_gen in the trained schema), then
#   1. a first, full aggregate      (targets: wall <= 30 s, peak RSS <= 1 GiB)
#   2. a re-run with nothing changed (reads no cell file: rows copied from aggregate.h5)
#   3. a re-run after 100 files were rewritten (rereads exactly those)
# Wall time, CPU time (user + sys) and peak RSS come from GNU time (/usr/bin/time -v;
# Debian package `time`); the 1-minute load average before each run is printed too (on
# a shared machine the wall time follows the load; the CPU time much less).
#
#   bench/aggregate.sh [BUILD_DIR] [CELLS] [STEPS]      (defaults: build 10000 1000)
# Set KEEP=1 to keep the generated folder ($BENCH_DIR, default /tmp/attnsweep-bench-aggregate).
set -euo pipefail
BUILD=${1:-build}
CELLS=${2:-10000}
STEPS=${3:-1000}
ATTNSWEEP=$BUILD/attnsweep
GEN=$BUILD/bench/aggregate_gen
DIR=${BENCH_DIR:-/tmp/attnsweep-bench-aggregate}
for f in "$ATTNSWEEP" "$GEN" /usr/bin/time; do [ -x "$f" ] || { echo "missing $f (build first; Debian: time)" >&2; exit 2; }; done
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$DIR"' EXIT

if [ ! -f "$DIR/manifest.json" ] || [ "$(ls "$DIR/runs" | wc -l)" != "$CELLS" ]; then
  rm -rf "$DIR"
  echo "generating $CELLS cells x $STEPS steps x 4 layers x 4 heads in $DIR ..."
  t0=$(date +%s.%N)
  "$GEN" "$DIR" --cells "$CELLS" --steps "$STEPS" --layers 4 --heads 4 --procs "$(nproc)"
  echo "  generated in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s, $(du -sh "$DIR/runs" | cut -f1) on disk"
fi
rm -f "$DIR/aggregate.h5"
sync

measure() {  # measure LABEL: runs aggregate under GNU time: wall, CPU (user + sys), peak RSS, load
  local label=$1 log
  log=$(mktemp)
  local load
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -v "$ATTNSWEEP" aggregate "$DIR" >"$log.out" 2>"$log"
  local wall rss cpu
  wall=$(sed -n 's/.*Elapsed (wall clock) time (h:mm:ss or m:ss): //p' "$log" | awk -F: '{ s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; print s }')
  rss=$(sed -n 's/.*Maximum resident set size (kbytes): //p' "$log")
  cpu=$(awk -F': ' '/User time \(seconds\)|System time \(seconds\)/ { s += $2 } END { print s }' "$log")
  printf '%-34s wall %7.2f s (target <= 30 s)   CPU %6.2f s   peak RSS %7.1f MiB (target <= 1024 MiB)   load %s   %s\n' \
    "$label" "$wall" "$cpu" "$(awk -v r="$rss" 'BEGIN { print r / 1024 }')" "$load" "$(grep -o 'aggregated.*cells ([^)]*)' "$log.out")"
  rm -f "$log" "$log.out"
}

echo "attnsweep aggregate on $CELLS files ($(nproc) cores; $(du -sh "$DIR/runs" | cut -f1)):"
measure "1. first aggregate (all files)"
ls -la "$DIR/aggregate.h5" | awk '{ printf "   aggregate.h5: %.1f MiB\n", $5 / 1048576 }'
measure "2. re-run, nothing changed"
# Rewrite 100 files (same content, new mtime): exactly those are read again.
for f in $(ls "$DIR"/runs/*.h5 | head -100); do cp -p "$f" "$f.x" && mv "$f.x" "$f" && touch "$f"; done
measure "3. re-run, 100 files changed"
