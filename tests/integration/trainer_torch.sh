#!/usr/bin/env bash
# The trainer's model (loss, every gradient, 20 optimizer steps) against PyTorch autograd
# for every activation and every head (with and without padding). Needs Debian's
# /usr/bin/python3 with torch and h5py; SKIPPED (77) without them. BUILD = the build folder (set by ctest).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
: "${BUILD:?set BUILD to the build folder}"
py=/usr/bin/python3
if ! "$py" -c "import torch, h5py" 2>/dev/null; then
  echo "SKIPPED: $py lacks torch or h5py"; exit 77
fi
export TRAINER_REF_DUMP="$BUILD/trainer_ref_dump" OMP_NUM_THREADS="${OMP_NUM_THREADS:-2}"
exec "$py" "$here/trainer_torch.py"
