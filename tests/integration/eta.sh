#!/usr/bin/env bash
# The ETA holds early (#52): about a tenth into a 2-slot image grid (3 s into a run of about
# 30 s, before any cell has finished), status.json's eta_s is within 2x of the time the
# run then really takes to finish. The ETA is plan's
# cost of the work left, calibrated by the work done so far (coordinator/sweep.cpp
# eta_s), so a loaded machine slows both alike; the cells are alike, so "a tenth" is
# well defined.
source "$(dirname "$0")/lib.bash"
[ -e /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || fail "no Fashion-MNIST (Debian: dataset-fashion-mnist)"
cat > g.json <<'J'
{"axes": {"task": ["image"], "seed": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]},
 "fixed": {"prompt_length": 16, "dim": 32, "heads": 2, "layers": 2, "mlp_ratio": 2, "steps": 2000, "batch": 64,
           "warmup_steps": 5, "log_every": 10, "eval_every": 0, "eval_batches": 2}}
J
"$ATTNSWEEP" run g.json --out d --workers 2 --threads 1 >run.log 2>&1 &
pid=$!
t_mark=""; eta=""
for _ in $(seq 6000); do
  if [ -s d/status.json ]; then
    read -r done eta_now < <($PY -c "
import json
s = json.load(open('d/status.json'))
print(1 if s['elapsed_s'] >= 3 else 0, s['eta_s'] if s['eta_s'] is not None else -1)" 2>/dev/null || echo "0 -1")
    if [ "${done:-0}" -ge 1 ] && [ "${eta_now%.*}" != "-1" ]; then
      t_mark=$(date +%s.%N); eta=$eta_now; break
    fi
  fi
  kill -0 $pid 2>/dev/null || break
  sleep 0.05
done
wait $pid
t_end=$(date +%s.%N)
check "the run finished" grep -q "finished: 10 cells: 10 complete" run.log
check "an ETA was read 3 s in" test -n "$t_mark"
check "the ETA then ($eta s) is within 2x of the time left ($(echo "$t_end - $t_mark" | bc -l | xargs printf %.1f) s)" \
  $PY -c "import sys; eta, left = float(sys.argv[1]), float(sys.argv[2]); assert 0.5 <= eta / left <= 2.0, (eta, left)" \
  "$eta" "$(echo "$t_end - $t_mark" | bc -l)"
