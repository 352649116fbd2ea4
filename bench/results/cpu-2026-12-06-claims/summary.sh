#!/usr/bin/env bash
# Copies each grid's status, summary.csv and verdicts (aggregate + verdict) from $RUNS here.
set -u
cd "$(dirname "$0")"
BIN=${ATTNSWEEP_BIN:-/work/attnsweep-bg}
RUNS=${RUNS:-/work/runs-claims}
for d in "$RUNS"/*/; do
  g=$(basename "$d")
  mkdir -p "$g"
  "$BIN" status "$d" > "$g/status.txt" 2>&1
  "$BIN" aggregate "$d" > /dev/null 2>&1 && cp "$d/summary.csv" "$g/"
  "$BIN" verdict "$d" > "$g/verdicts.txt" 2>&1 && cp "$d/verdicts.csv" "$g/"
  cp "$d/manifest.json" "$g/"
done
cp "$RUNS/log.txt" . 2>/dev/null || true
