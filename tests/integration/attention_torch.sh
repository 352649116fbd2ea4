#!/usr/bin/env bash
# `attnsweep attention` against PyTorch autograd for every activation, plus its input
# errors (exit 2). Needs Debian's /usr/bin/python3 with torch and h5py; SKIPPED (77)
# without them. ATTNSWEEP = the binary (set by ctest); ATTNSWEEP_DEVICE = cpu (default)
# or cuda (SKIPPED without a GPU).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${ATTNSWEEP:?set ATTNSWEEP to the attnsweep binary}"
py=/usr/bin/python3
if ! "$py" -c "import torch, h5py" 2>/dev/null; then
  echo "SKIPPED: $py lacks torch or h5py"; exit 77
fi
if [[ "${ATTNSWEEP_DEVICE:-cpu}" == cuda ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED: no GPU for ATTNSWEEP_DEVICE=cuda"; exit 77
fi
export ATTNSWEEP OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec "$py" "$here/attention_torch.py"
