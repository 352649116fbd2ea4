#!/usr/bin/env bash
# torch.ops.attnsweep.attention checked like a PyTorch op (torch_op.py): composite
# equality, gradcheck, the binary's equality and bad inputs, for every activation.
# SKIPPED (77) where the op is not built (no libtorch-dev); a build that has libtorch's
# headers and still lacks the op fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${ATTNSWEEP:?set ATTNSWEEP to the attnsweep binary}" "${BUILD:?set BUILD to the build directory}"
lib="$BUILD/python/attnsweep_torch/libattnsweep_torch.so"
if [ ! -f "$lib" ]; then
  if [ -f /usr/include/torch/library.h ]; then
    echo "FAIL: libtorch-dev is installed but $lib was not built"; exit 1
  fi
  echo "SKIPPED: no libtorch-dev: the PyTorch op is not built"; exit 77
fi
export ATTNSWEEP PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
cd "$(mktemp -d)"
exec /usr/bin/python3 "$here/torch_op.py"
