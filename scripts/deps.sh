#!/usr/bin/env bash
# Installs what attnsweep builds and tests against, from Debian 12's packages
# (run as root). The CUDA toolkit is optional: where nvcc is found, the CUDA backend
# is compiled too.
set -euo pipefail
PKGS=(cmake ninja-build g++ pkg-config
      libopenmpi-dev openmpi-bin libhdf5-dev nlohmann-json3-dev libboost-program-options-dev
      libopenblas-dev libgtest-dev libgmock-dev
      libboost-context-dev  # emulator/: the emulated device's fibers
      libssl-dev  # base/sha256.cpp: SHA-256 from libcrypto
      python3-h5py python3-numpy python3-pandas python3-torch python3-jsonschema python3-matplotlib python3-pil chromium time
      dataset-fashion-mnist slurmctld slurmd slurm-client munge
      iproute2 iputils-ping util-linux  # tests/hosts: namespaces as hosts (ip netns, ping, unshare, nsenter)
      clang-14 libclang-rt-14-dev libomp-14-dev  # tests/fuzz (libFuzzer, clang's OpenMP)
      clang-format-14  # scripts/format.sh --check
      librandom123-dev  # tests/unit/test_normals.cpp: Random123's Philox, the reference of experiments/philox.h
      python3-venv  # tests/sass: the cuobjdump wheel's venv
      libtorch-dev)  # torch_op/: attnsweep's attention as a PyTorch op (matches python3-torch 1.13)
missing=()
for p in "${PKGS[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "attnsweep: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# tests/sass/check_mma_sass.sh reads the CUDA kernels' machine code with cuobjdump, which
# the Debian CUDA toolkit and CUDA 13's nvcc-only installs lack: the pinned PyPI wheels
# (cuobjdump -sass runs nvdisasm), in a venv the test looks in (SASS_VENV, default /opt/attnsweep-sass-venv here).
if command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  venv=${SASS_VENV:-/opt/attnsweep-sass-venv}
  if ! ls "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/nvdisasm > /dev/null 2>&1; then
    echo "attnsweep: installing nvidia-cuda-cuobjdump and -nvdisasm into $venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
  fi
fi
# tests/integration/export_tensorboard.sh reads `attnsweep export --tensorboard` back with the
# tensorboard package's own reader, which Debian 12 lacks: the pinned PyPI wheels in a venv
# the test looks in (TB_VENV, default /opt/attnsweep-tb-venv). numpy and protobuf are pinned
# too: tensorboard 2.15 predates numpy 2 (np.string_) and was released against protobuf 4.
venv=${TB_VENV:-/opt/attnsweep-tb-venv}
if ! "$venv/bin/python" -c "import tensorboard" > /dev/null 2>&1; then
  echo "attnsweep: installing tensorboard into $venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q tensorboard==2.15.2 numpy==1.24.4 protobuf==4.25.3
fi
