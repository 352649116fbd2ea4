#!/bin/bash
# measure2.sh TAG GRID...: plan (idle and at the load now), then run on 2 slots: wall, CPU (user+sys of the run and its children), load before/after
B=${B:-/tmp/w41/attnsweep_new}
tag=$1; shift
for g in "$@"; do
  out=/tmp/w41/m_${tag}_$g; rm -rf $out
  p=$($B plan /work/wt41/experiments/grids/$g.json --workers 2 | tail -1 | grep -o "estimated [0-9]* CPU-slot seconds, about [0-9]* s of wall time on 2 CPU slots\(; about [0-9]* s at this machine's load now, [0-9.]*\)\?")
  l0=$(cut -d' ' -f1-3 /proc/loadavg); d0=$(date -u +%H:%M:%S)
  /usr/bin/time -o /tmp/w41/t_$tag.txt -f "%e %U %S" $B run /work/wt41/experiments/grids/$g.json --out $out --workers 2 >/dev/null 2>&1
  l1=$(cut -d' ' -f1-3 /proc/loadavg)
  read w u s < /tmp/w41/t_$tag.txt
  echo "$g start=$d0 wall=$w cpu=$(python3 -c "print(round($u+$s,1))") load_before=[$l0] load_after=[$l1] plan=[$p]"
  sleep 40
done
