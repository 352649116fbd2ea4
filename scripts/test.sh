#!/usr/bin/env bash
# The tests: install, build with warnings as errors, run every unit and integration
# test (CUDA tests report SKIPPED without a GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
bash scripts/build.sh -DATTNSWEEP_WERROR=ON
cd build
ctest --output-on-failure --timeout 900
