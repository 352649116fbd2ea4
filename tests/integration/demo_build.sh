# The demo builds what the demo runs (#52): scripts/demo.sh's own configuration of
# build-demo/ compiles the binary alone, CPU only, even on a machine with nvcc (CI's), and
# the README's count of its build targets is that configuration's (within 15 %).
source "$(dirname "$0")/lib.bash"
run_rc bash "$SRC/scripts/demo.sh" --configure "$WORK/b"
check "demo.sh --configure configures (rc $RC: $ERR)" test "$RC" = 0
ninja -C "$WORK/b" -t commands attnsweep > commands.txt
check "the demo's build compiles no CUDA (nvcc at $(command -v nvcc || echo /usr/local/cuda/bin/nvcc))" \
  bash -c "! grep -Eq 'nvcc|\\.cu( |$)' commands.txt"
steps=$(wc -l < commands.txt)
readme=$(grep -o '[0-9]* build targets' "$SRC/README.md" | grep -o '^[0-9]*')
check "the README's $readme build targets are the demo's $steps (within 15 %)" \
  $PY -c "import sys; a, b = int(sys.argv[1]), int(sys.argv[2]); sys.exit(abs(a - b) > 0.15 * b)" "$readme" "$steps"
