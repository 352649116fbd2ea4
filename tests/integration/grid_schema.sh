#!/usr/bin/env bash
# `attnsweep schema`: a valid JSON Schema (draft 2020-12) that accepts every example grid
# and rejects a misspelt key, an out-of-range value and an unknown activation, as
# `attnsweep plan` does; docs/grid-schema.json is its current output. Validated with
# Debian's python3-jsonschema.
source "$(dirname "$0")/lib.bash"
"$ATTNSWEEP" schema >schema.json
check "docs/grid-schema.json is the output of attnsweep schema (regenerate: attnsweep schema > docs/grid-schema.json)" \
  cmp -s schema.json "$SRC/docs/grid-schema.json"
cat >misspelt.json <<'J'
{"axes": {"task": ["norm_probe"], "prompt_length": [16]}, "fixed": {"sead": 1}}
J
cat >range.json <<'J'
{"axes": {"task": ["norm_probe"], "activation": ["poly"], "degree": [17], "prompt_length": [16]}}
J
cat >activation.json <<'J'
{"axes": {"task": ["norm_probe"], "activation": ["tanh"], "prompt_length": [16]}}
J
cat >resources.json <<'J'
{"axes": {"task": ["norm_probe"], "prompt_length": [16]}, "resources": {"retries": -1}}
J
$PY - schema.json "$SRC"/experiments/grids/*.json -- misspelt.json range.json activation.json resources.json <<'PY'
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft202012Validator.check_schema(schema)
args = sys.argv[2:]
good, bad = args[:args.index("--")], args[args.index("--") + 1:]
v = jsonschema.Draft202012Validator(schema)
failed = 0
for path in good:
    errs = list(v.iter_errors(json.load(open(path))))
    print(("ok  " if not errs else "FAIL") + f" accepted: {path}" + "".join(f"\n     {e.message}" for e in errs))
    failed += bool(errs)
for path in bad:
    errs = list(v.iter_errors(json.load(open(path))))
    print(("ok  " if errs else "FAIL") + f" rejected: {path}: " + (errs[0].message if errs else "no error"))
    failed += not errs
print(f"{len(good) + len(bad) - failed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
for f in misspelt range activation resources; do
  run_rc "$ATTNSWEEP" plan $f.json
  check "attnsweep plan rejects $f.json too (exit 2)" test "$RC" = 2
done
