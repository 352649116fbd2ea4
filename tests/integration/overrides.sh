# Command-line overrides after the grid file (Hydra's words): key=value fixes a key,
# key=a,b makes it an axis, resources.key=value sets a resource; validated like the file,
# recorded in the manifest, resumed when repeated; a changed grid's refusal says what
# changed in cells.
source "$(dirname "$0")/lib.bash"

cat > g.json <<'JSON'
{"name": "ov", "axes": {"task": ["norm_probe"], "activation": ["softmax"], "prompt_length": [16, 32]},
 "fixed": {"samples": 2}}
JSON
plan_json() { "$ATTNSWEEP" plan g.json "$@" --json; }

# A fixed value and an axis: 2 prompt lengths x 2 activations, samples 3 in every cell.
run_rc plan_json samples=3 activation=softmax,relu
check "plan with overrides exits 0 ($ERR)" test "$RC" = 0
check "key=a,b is an axis and key=value a fixed value" $PY -c "
import json, sys; d = json.loads(sys.argv[1]); cells = [c['config'] for c in d['cells']]
assert len(cells) == 4, len(cells)
assert sorted({c['activation'] for c in cells}) == ['relu', 'softmax'], cells
assert {c['samples'] for c in cells} == {3}, cells" "$OUT"
# An axis overridden by a fixed value, a number kept a number, a string kept a string.
run_rc plan_json prompt_length=64 +head_dim=8
check "key=value replaces an axis (rc $RC)" $PY -c "
import json, sys; d = json.loads(sys.argv[1]); cells = [c['config'] for c in d['cells']]
assert len(cells) == 1 and cells[0]['prompt_length'] == 64 and cells[0]['head_dim'] == 8, cells" "$OUT"

# plan's text: each cell's swept keys (softmax has no scale: scale varies too), every other
# key once above them, not the whole config a line.
run_rc "$ATTNSWEEP" plan g.json activation=softmax,relu
echo "$OUT"
check "plan's first line: the swept keys, then every other key once" grep -Eq \
  "^swept: activation, prompt_length, scale; every cell: .*samples=2 .*task=norm_probe$" <<<"$(head -1 <<<"$OUT")"
check "then a cell a line: its id and its swept keys only" test \
  "$(grep -Ec '^[0-9a-f]{16} activation=(softmax|relu) prompt_length=(16|32)( scale=none)?$' <<<"$OUT")" = 4

# Validated like the file: exit 2, naming the key and what was expected.
run_rc "$ATTNSWEEP" plan g.json samples=abc
check "a bad value is refused (rc $RC)" test "$RC" = 2
check "naming fixed.samples and the overrides: $ERR" bash -c \
  'grep -q "fixed.samples: expected an integer" <<<"$0" && grep -q "with the overrides samples=abc" <<<"$0"' "$ERR"
run_rc "$ATTNSWEEP" plan g.json sampels=3
check "an unknown key is refused as in the file (rc $RC): $ERR" bash -c '[ "$1" = 2 ] && grep -q "sampels" <<<"$0"' "$ERR" "$RC"
run_rc "$ATTNSWEEP" plan g.json =3
check "a word that is no key=value is refused (rc $RC): $ERR" bash -c \
  '[ "$1" = 2 ] && grep -q "override \"=3\": expected key=value" <<<"$0"' "$ERR" "$RC"
run_rc "$ATTNSWEEP" plan g.json --samples 3
check "a --key flag is still an unknown option (rc $RC)" test "$RC" = 2

# run: the overrides are recorded; the same words resume; other words are refused with
# what changed, in cells.
run_rc "$ATTNSWEEP" run g.json samples=3 resources.retries=0 --out r --workers 2
check "run with overrides exits 0 ($ERR)" test "$RC" = 0
check "the manifest records the overrides and the grid they made" $PY -c "
import json; m = json.load(open('r/manifest.json'))
assert m['overrides'] == ['samples=3', 'resources.retries=0'], m['overrides']
assert m['grid']['fixed']['samples'] == 3 and m['grid']['resources']['retries'] == 0, m['grid']"
check "2 results" test "$(ls r/runs/*.h5 | wc -l)" = 2
run_rc "$ATTNSWEEP" run g.json samples=3 resources.retries=0 --out r --workers 2
check "the same overrides resume: nothing runs again ($ERR)" grep -q "0 run now" <<<"$ERR"
run_rc "$ATTNSWEEP" run g.json samples=3 prompt_length=16,32,64 --out r --workers 2
check "a changed grid is refused (rc $RC)" test "$RC" = 2
check "saying what changed in cells: $ERR" grep -q "holds a different grid (2 cells; this one has 3: 1 added, 0 removed, 2 the same)" <<<"$ERR"
# Valid but likely a mistake: warm-up longer than training is warned about, not refused.
cat > t.json <<'JSON'
{"name": "warm", "axes": {"task": ["image"], "seed": [0, 1]}, "fixed": {"steps": 60, "layers": 1, "prompt_length": 16}}
JSON
run_rc "$ATTNSWEEP" plan t.json
check "warmup_steps (default 100) above steps 60: plan warns and goes on (rc $RC): $ERR" bash -c \
  '[ "$1" = 0 ] && grep -q "warning: t.json: 2 cells with warmup_steps above steps" <<<"$0"' "$ERR" "$RC"
run_rc "$ATTNSWEEP" plan t.json warmup_steps=10
check "and says nothing once warmup_steps is below steps" bash -c '[ "$1" = 0 ] && ! grep -q warning <<<"$0"' "$ERR" "$RC"
# An error no retry can mend (bf16 on CPU slots) fails each cell once, not after its retries.
run_rc "$ATTNSWEEP" run t.json precision=bf16 steps=2 warmup_steps=0 resources.retries=2 --out bf --workers 2 --device cpu
check "bf16 on CPU slots: run exits 1 (rc $RC)" test "$RC" = 1
check "each cell attempted once" $PY -c "
import json; ev = [json.loads(l) for l in open('bf/events.jsonl')]
starts = [e for e in ev if e['event'] == 'started']
assert len(starts) == 2, starts"
check "and run says why: $ERR" grep -q "bf16 and tf32 need a CUDA device" <<<"$ERR"
echo "overrides: plan, validation, run, manifest, resume and the refusal checked"

# A key no cell takes is refused, naming it (Hydra's struct mode), unless asked for with +;
# range(a,b[,step]) and [a,b] sweep; -m gets a hint that sweeps need no flag.
run_rc "$ATTNSWEEP" plan "$SRC/experiments/grids/image_smoke.json" n_train=1000
check "n_train=1000 on an image grid exits 2 (got $RC)" test "$RC" = 2
check "it names the key: $ERR" grep -q 'override "n_train=1000": no cell of this grid takes n_train' <<<"$ERR"
run_rc "$ATTNSWEEP" plan g.json sampels=3
check "a misspelt key gets a did-you-mean: $ERR" grep -q 'sampels: unknown key (did you mean "samples"?)' <<<"$ERR"
run_rc "$ATTNSWEEP" plan "$SRC/experiments/grids/image_smoke.json" +n_train=1000
check "+n_train=1000 is taken on purpose (rc $RC: $ERR)" test "$RC" = 0
run_rc plan_json 'seed=range(0,3)' 'samples=[2,4]'
check "range(0,3) and [2,4] sweep (rc $RC: $ERR)" $PY -c "
import json, sys; cells = [c['config'] for c in json.loads(sys.argv[1])['cells']]
assert sorted({c['seed'] for c in cells}) == [0, 1, 2] and sorted({c['samples'] for c in cells}) == [2, 4], cells
assert len(cells) == 2 * 3 * 2, len(cells)" "$OUT"
run_rc "$ATTNSWEEP" plan g.json 'seed=range(3'
check "a malformed range says the grammar: $ERR" grep -q "key=range(a,b\[,step\])" <<<"$ERR"
run_rc "$ATTNSWEEP" plan g.json -m
check "-m: sweeps need no flag: $ERR" grep -q "no flag is needed to sweep" <<<"$ERR"

# plan's cost of command cells (#52): a guess it says is one, or the grid's resources.cost_s.
cat > cmd.json <<'J'
{"command": {"argv": ["true"]}, "axes": {"task": ["command"], "seed": [0, 1, 2]}}
J
run_rc "$ATTNSWEEP" plan cmd.json
check "plan says the command cells' cost is a guess: $OUT" grep -q "note: the 3 command cells count 60 s each, a guess" <<<"$OUT"
run_rc "$ATTNSWEEP" plan cmd.json resources.cost_s=7
check "resources.cost_s is the estimate: $OUT" bash -c "grep -q 'estimated 21 CPU-slot seconds' <<<\"\$1\" && ! grep -q 'a guess' <<<\"\$1\"" _ "$OUT"
