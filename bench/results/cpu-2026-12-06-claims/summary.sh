#!/usr/bin/env bash
# Copies each grid's status, summary.csv and verdicts (aggregate + verdict) from $RUNS here
# (<grid>/), and the run directories of the training grids (runs/<grid>/: cells, result
# files, logs, manifest, events) so that the next session resumes them (README.md); not
# the checkpoints (2.4 MB a cell: a running cell restarts) nor paperB_concentration's 324
# result files (it reruns in 3 min).
set -u
cd "$(dirname "$0")"
BIN=${ATTNSWEEP_BIN:-/work/build-cpu/attnsweep}
RUNS=${RUNS:-/work/runs-claims}
for d in "$RUNS"/*/; do
  d=${d%/}
  g=$(basename "$d")
  mkdir -p "$g"
  "$BIN" status "$d" > "$g/status.txt" 2>&1
  "$BIN" aggregate "$d" > /dev/null 2>&1 && cp "$d/summary.csv" "$g/"
  "$BIN" verdict "$d" > "$g/verdicts.txt" 2>&1 && cp "$d/verdicts.csv" "$g/"
  cp "$d/manifest.json" "$g/"
  if [ "$g" != paperB_concentration ] && [ "$(realpath "$RUNS")" != "$(realpath runs)" ]; then
    rm -rf "runs/$g" && mkdir -p "runs/$g"
    for part in cells runs logs outputs manifest.json events.jsonl status.json summary.csv verdicts.csv; do
      [ -e "$d/$part" ] && cp -r "$d/$part" "runs/$g/"
    done
  fi
done
cp "$RUNS/log.txt" . 2>/dev/null || true
