# Small grids of the multi-host tests (sourced).
# grid_mixed FILE: 8 norm-probe cells, 12 synthetic cells of 0.3 s (so that every rank
# gets some) and 1 short training cell: about 2 s on 6 slots.
grid_mixed() {
  cat >"$1" <<'JSON'
{"name": "hosts-mixed",
 "axes": {"task": ["norm_probe"], "activation": ["softmax", "poly"], "degree": [3], "scale": ["inv_sqrt_n", "inv_n"],
          "prompt_length": [16, 64], "seed": [0]},
 "include": [{"task": "synthetic", "seed": 1, "seconds": 0.3}, {"task": "synthetic", "seed": 2, "seconds": 0.3},
             {"task": "synthetic", "seed": 3, "seconds": 0.3}, {"task": "synthetic", "seed": 4, "seconds": 0.3},
             {"task": "synthetic", "seed": 5, "seconds": 0.3}, {"task": "synthetic", "seed": 6, "seconds": 0.3},
             {"task": "synthetic", "seed": 7, "seconds": 0.3}, {"task": "synthetic", "seed": 8, "seconds": 0.3},
             {"task": "synthetic", "seed": 9, "seconds": 0.3}, {"task": "synthetic", "seed": 10, "seconds": 0.3},
             {"task": "synthetic", "seed": 11, "seconds": 0.3}, {"task": "synthetic", "seed": 12, "seconds": 0.3},
             {"task": "image", "prompt_length": 16, "layers": 1, "heads": 2, "dim": 16, "steps": 40, "batch": 16,
              "log_every": 10, "eval_every": 20, "seed": 0}]}
JSON
}
# grid_synthetic FILE N SECONDS [RANK_TIMEOUT_S]: N synthetic cells of SECONDS each.
grid_synthetic() {
  $PY -c "import json, sys
g = {'name': 'hosts-synthetic', 'axes': {'task': ['synthetic'], 'seed': list(range($2))}, 'fixed': {'seconds': $3}}
if '${4:-}': g['resources'] = {'rank_timeout_s': float('${4:-0}')}
json.dump(g, open('$1', 'w'))"
}
grid_cells() { "$ATTNSWEEP" plan "$1" --json | $PY -c "import json, sys; d = json.load(sys.stdin); print(len(d['cells']) if isinstance(d, dict) else len(d))"; }
elapsed() { $PY -c "print(f'{$2 - $1:.1f}')"; }  # elapsed T0 T1: seconds between two `date +%s.%N`
# start_sweep DIR ARGS...: mpirun over the hosts in the background (MPIRUN its pid, T0 its
# start), output in DIR.stdout / DIR.stderr; a watchdog kills it after 120 s.
start_sweep() {
  local d=$1
  shift
  # shellcheck disable=SC2034  # T0 and MPIRUN are for the caller
  T0=$(date +%s.%N)
  mpirun_hosts -np 6 "${MPIRUN_ARGS[@]}" "$ATTNSWEEP" run grid.json --out "$d" --workers 1 --threads 1 "$@" \
    >"$d.stdout" 2>"$d.stderr" &
  MPIRUN=$!
}
wait_sweep() {  # wait_sweep TIMEOUT_S: RC of mpirun, or 124 after TIMEOUT_S (mpirun then killed)
  local _
  for _ in $(seq $(($1 * 10))); do
    kill -0 "$MPIRUN" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$MPIRUN" 2>/dev/null; then
    kill -9 "$MPIRUN" 2>/dev/null || true
    wait "$MPIRUN" 2>/dev/null || true
    # shellcheck disable=SC2034  # RC is for the caller
    RC=124
    return 0
  fi
  set +e
  wait "$MPIRUN"
  # shellcheck disable=SC2034
  RC=$?
  set -e
}
# wait_results DIR N [TIMEOUT_S=30]: until N result files exist. A cap, not a measurement:
# a job that Slurm must first schedule and srun launch, beside a busy build, may take
# longer than 30 s to finish its first cells.
wait_results() {
  local _ cap=${3:-30}
  for _ in $(seq $((cap * 10))); do
    [ "$(find "$1/runs" -name '*.h5' 2>/dev/null | wc -l)" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "fewer than $2 results in $1 after $cap s"
}
results() { find "$1/runs" -name '*.h5' | wc -l; }
# valid_and_once DIR N: every file under DIR/runs is a complete result, N of them, and no
# cell was finished twice over all runs into DIR (a cell a rank finished after rank 0 was
# gone has a result file and no `finished` event: the rerun skipped it).
valid_and_once() {
  results_valid "$1" || return 1
  $PY - "$1" "$2" <<'PY'
import collections, glob, json, os, sys
d, n = sys.argv[1], int(sys.argv[2])
files = glob.glob(d + "/runs/*")
assert len(files) == n, f"{len(files)} result files, expected {n}"
ev = [json.loads(l) for l in open(d + "/events.jsonl") if l.strip()]
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
assert max(fin.values()) == 1, [c for c, k in fin.items() if k > 1]
runs = sum(1 for e in ev if e["event"] == "sweep_started")
print(f"{len(files)} valid results, {len(fin)} cells with a finished event, none twice, over {runs} runs")
PY
}

# closes_after_losses DIR N TIMEOUT MARGIN "RANKS" "HOSTS" RERUN...: the closing checks of
# a sweep that lost hosts, once mpirun is back: exactly RANKS (on HOSTS) were lost after
# TIMEOUT to TIMEOUT + MARGIN s of silence, every cell they held was reassigned, no result
# of a lost host counted after the loss, every cell finished once and the sweep ended 75;
# status.json says lost_ranks; RERUN (the same run) exits 0 and starts nothing; every file
# is valid.
closes_after_losses() {
  local dir=$1 n=$2 timeout=$3 margin=$4 ranks=$5 hosts=$6
  shift 6
  check "events: ranks $ranks on $hosts lost within $timeout + $margin s, their cells reassigned, every cell finished once" \
    $PY - "$dir/events.jsonl" "$n" "$timeout" "$margin" "$ranks" "$hosts" <<'PY'
import collections, json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
n, timeout, margin = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
ranks, hosts = sorted(int(r) for r in sys.argv[5].split()), set(sys.argv[6].split())
lost = [e for e in ev if e["event"] == "rank_lost"]
assert sorted(e["rank"] for e in lost) == ranks and {e["host"] for e in lost} == hosts, lost
assert all(timeout <= e["silent_s"] < timeout + margin for e in lost), lost
at = min(ev.index(e) for e in lost)
late = [e for e in ev[at:] if e["event"] == "finished" and e["host"] in hosts]
assert not late, f"a result of a lost host counted: {late}"
held = sorted(c for e in lost for c in e["cells"])
assert sorted(e["cell_id"] for e in ev if e["event"] == "reassigned") == held, held
fin = collections.Counter(e["cell_id"] for e in ev if e["event"] == "finished")
assert len(fin) == n and max(fin.values()) == 1, (len(fin), fin.most_common(1))
end = [e for e in ev if e["event"] == "sweep_finished"][-1]
assert end["exit_code"] == 75 and end["complete"] == n, end
print(f"lost after {sorted(round(e['silent_s'], 1) for e in lost)} s of silence; {len(held)} cells reassigned")
PY
  check "status.json says lost_ranks" grep -q '"state": "lost_ranks"' "$dir/status.json"
  run_rc "$@"
  check "the rerun exits 0 (got $RC) and starts nothing" test "$RC" = 0 -a "$(count_events "$dir" started)" = 0
  check "every cell finished exactly once, every file valid" valid_and_once "$dir" "$n"
}
