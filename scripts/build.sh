#!/usr/bin/env bash
# Configures and builds attnsweep into build/ (extra CMake arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j "$(nproc)"
