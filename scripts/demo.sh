#!/usr/bin/env bash
# The demo: install, build, run the norm-probe grid on local CPU slots (no Slurm, no
# GPU), aggregate it, and print the fitted log-log slopes of paper A's norm laws.
#   scripts/demo.sh --configure DIR   only configures the demo's build in DIR (tests/integration/demo_build.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo runs: the binary, CPU only (the demo runs on CPU slots; with nvcc on
# the machine a default build would compile the CUDA kernels too), in build-demo/ of its
# own, so that scripts/test.sh's build/ keeps its CUDA setting.
configure() { cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=OFF; }
if [ "${1:-}" = --configure ]; then
  configure "${2:?usage: scripts/demo.sh --configure DIR}"
  exit 0
fi
bash scripts/deps.sh
configure build-demo
cmake --build build-demo -j "$(nproc)" --target attnsweep
./build-demo/attnsweep run experiments/grids/norm_probe.json --out demo
./build-demo/attnsweep aggregate demo --fit-min-n 64
./build-demo/attnsweep report demo
echo "results: demo/runs/*.h5, demo/aggregate.h5, demo/summary.csv; report: $(pwd)/demo/report.html"
