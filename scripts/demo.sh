#!/usr/bin/env bash
# The demo: install, build, run the norm-probe grid on local CPU slots (no Slurm, no
# GPU), aggregate it, and print the fitted log-log slopes of paper A's norm laws.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# Only the binary the demo runs (not the tests, benchmarks or emulator): scripts/test.sh
# builds the rest into the same build/.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)" --target attnsweep
./build/attnsweep run experiments/grids/norm_probe.json --out demo
./build/attnsweep aggregate demo --fit-min-n 64
./build/attnsweep report demo
echo "results: demo/runs/*.h5, demo/aggregate.h5, demo/summary.csv; report: $(pwd)/demo/report.html"
