#!/usr/bin/env bash
# The tensor-core attention kernels' machine code, read on any machine (no GPU needed):
# fails unless every kernel whose name matches PATTERN (default mma_forward_kernel) in the
# built library LIB (default pattern: the forward and backward kernels) contains HMMA
# instructions, has a zero stack frame and zero local memory (cuobjdump -res-usage:
# STACK:0, LOCAL:0) and no LDL / STL instruction (a spill shows as both), and unless
# there are EXPECT such kernels. EXPECT's default is derived from the activation registry
# (`$ATTNSWEEP activations --json`): one variant per activation, and for one that takes
# a degree one per fixed degree plus the run-time one; then each variant's forward with
# norms on and off in every kernels/cuda/attention_mma_fwd_*.cu (one head width and type
# each), and its dK/dV and dQ kernels in every attention_mma_bwd_*.cu (today 9 variants,
# 4 forward and 2 backward files: 108). Prints the registers and HMMA count of each.
# Then checks that the check can fail: the CUDA-core
# fused forward (fused_forward_kernel) must be rejected (it has no HMMA).
#   LIB=build/kernels/libattnsweep_kernels.a ATTNSWEEP=build/attnsweep bash tests/sass/check_mma_sass.sh
# cuobjdump: $CUOBJDUMP, else on PATH, else /usr/local/cuda/bin, else the pinned PyPI wheels
# (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm: -sass runs nvdisasm; versions below) in a venv at $SASS_VENV (default
# $BUILD/sass-venv; scripts/deps.sh installs it in /opt/attnsweep-sass-venv, also looked in). Exit 77 (ctest: SKIPPED)
# only when no cuobjdump can be found or installed (no network).
set -uo pipefail
CUOBJDUMP_WHEELS=(nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37)
lib=${LIB:?LIB= the library or object to read}
pattern=${PATTERN:-'mma_(forward|dkdv|dq)_kernel'}
if [ -z "${EXPECT:-}" ]; then
  : "${ATTNSWEEP:?ATTNSWEEP= the attnsweep binary (its activation registry gives the kernel count), or EXPECT=}"
  src=${SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
  variants=$("$ATTNSWEEP" activations --json | /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
print(sum(r["fixed_degrees"] + 1 if a["takes_degree"] else 1 for a in r["activations"]))') ||
    { echo "FAIL: cannot read the activation registry from $ATTNSWEEP"; exit 1; }
  nfwd=$(ls "$src"/kernels/cuda/attention_mma_fwd_*.cu | wc -l)
  nbwd=$(ls "$src"/kernels/cuda/attention_mma_bwd_*.cu | wc -l)
  EXPECT=$((variants * (2 * nfwd + 2 * nbwd)))
  echo "expected kernels: $variants variants x (2 x $nfwd forward + 2 x $nbwd backward files) = $EXPECT"
fi
expect=$EXPECT
build=${BUILD:-$(dirname "$lib")/..}

find_cuobjdump() {
  if [ -n "${CUOBJDUMP:-}" ]; then echo "$CUOBJDUMP"; return 0; fi
  if command -v cuobjdump > /dev/null 2>&1; then command -v cuobjdump; return 0; fi
  [ -x /usr/local/cuda/bin/cuobjdump ] && { echo /usr/local/cuda/bin/cuobjdump; return 0; }
  local venv=${SASS_VENV:-$build/sass-venv}
  local found
  found=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm \
    /opt/attnsweep-sass-venv/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm 2>/dev/null | head -1)
  found=${found%nvdisasm}cuobjdump
  if [ ! -x "$found" ]; then
    { python3 -m venv "$venv" && "$venv/bin/pip" install -q "${CUOBJDUMP_WHEELS[@]}"; } >&2 || return 1
    found=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump 2>/dev/null | head -1)
  fi
  [ -n "$found" ] && echo "$found"
}
cuobjdump=$(find_cuobjdump) || { echo "SKIP: no cuobjdump (install ${CUOBJDUMP_WHEELS[*]})"; exit 77; }
[ -n "$cuobjdump" ] || { echo "SKIP: no cuobjdump (install ${CUOBJDUMP_WHEELS[*]})"; exit 77; }
# -sass runs nvdisasm: the one beside cuobjdump first.
export PATH="$(dirname "$cuobjdump"):$PATH"
echo "cuobjdump: $cuobjdump ($("$cuobjdump" --version | tail -1))"
[ -f "$lib" ] || { echo "FAIL: $lib does not exist"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$cuobjdump" -sass "$lib" > "$tmp/sass.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt"; echo "FAIL: cuobjdump -sass"; exit 1; }
"$cuobjdump" -res-usage "$lib" > "$tmp/res.txt" 2>> "$tmp/err.txt" || { cat "$tmp/err.txt"; echo "FAIL: cuobjdump -res-usage"; exit 1; }

# check PATTERN EXPECT: prints one line per kernel; exit 0 iff all pass.
check() {
  awk -v pat="$1" -v expect="$2" '
    FNR == 1 { file++ }
    file == 1 && /Function :/ { f = $NF; insass = (f ~ pat); if (insass) seen[f] = 1; next }
    file == 1 && insass && /HMMA/ { hmma[f]++ }
    file == 1 && insass && /[^A-Z](LDL|STL)[. ]/ { local[f]++ }
    file == 2 && /Function / { g = $2; sub(/:$/, "", g); next }
    file == 2 && /REG:/ && g ~ pat {
      for (i = 1; i <= NF; i++) { split($i, kv, ":"); res[g, kv[1]] = kv[2] }
      inres[g] = 1
    }
    END {
      n = 0; bad = 0
      for (f in seen) {
        n++
        h = hmma[f] + 0; l = local[f] + 0
        st = res[f, "STACK"]; lo = res[f, "LOCAL"]; rg = res[f, "REG"]
        ok = h > 0 && l == 0 && st == "0" && lo == "0"
        if (!ok) bad++
        printf "%s REG %s STACK %s LOCAL %s HMMA %d LDL/STL %d  %s\n", ok ? "ok  " : "FAIL", rg, st, lo, h, l, f
      }
      if (n != expect) { printf "FAIL: %d kernels match %s, expected %d\n", n, pat, expect; bad++ }
      exit bad > 0
    }' "$tmp/sass.txt" "$tmp/res.txt"
}

echo "== $pattern in $lib"
check "$pattern" "$expect" | sort -k9
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then echo "FAIL: the tensor-core kernels above"; exit 1; fi
if ! grep -q 'Function : .*fused_forward_kernel' "$tmp/sass.txt"; then
  echo "PASS: $expect tensor-core kernels with HMMA, no stack, no local memory (no fused kernels in LIB: no self-check)"
  exit 0
fi
echo "== self-check: the CUDA-core fused forward must be rejected (for having no HMMA)"
nfused=$(grep -c 'Function : .*fused_forward_kernel' "$tmp/sass.txt")
if check fused_forward_kernel "$nfused" > "$tmp/neg.txt"; then
  cat "$tmp/neg.txt"; echo "FAIL: the check accepted kernels without HMMA"; exit 1
fi
grep -q 'HMMA 0 ' "$tmp/neg.txt" || { cat "$tmp/neg.txt"; echo "FAIL: the self-check failed for another reason"; exit 1; }
head -3 "$tmp/neg.txt"
echo "PASS: $expect tensor-core kernels with HMMA, no stack, no local memory; the check rejects non-mma kernels"
