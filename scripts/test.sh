#!/usr/bin/env bash
# The tests: install, check the formatting (clang-format-14), build with warnings as errors, run every unit and integration
# test (CUDA tests report SKIPPED without a GPU); then the CUDA tests on the emulated
# device (build-emu/, docs/cuda-emulator.md): every CUDA test runs there in the exact
# numerics, and those that the hardware-like numerics can change again in them; then the
# reliability stage: the unit and fault tests again under ASan+UBSan (build-asan/), and
# a short fuzz run (tests/fuzz/run.sh; docs/reliability.md).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
bash scripts/deps.sh
bash scripts/format.sh --check
bash scripts/build.sh -DATTNSWEEP_WERROR=ON
# Two at a time (the fault tests alone: tests/CMakeLists.txt).
(cd build && ctest --output-on-failure --timeout 900 -j 2)

echo "attnsweep: emulated CUDA device stage"
t0=$(date +%s)
# The CUDA toolkit's headers are all it takes (no nvcc, no driver): where they are missing
# the stage cannot build, and says so.
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ]; then
  cmake -S . -B build-emu -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNSWEEP_CUDA=EMULATE -DATTNSWEEP_WERROR=ON \
        -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}"
  cmake --build build-emu -j "$(nproc)" --target attnsweep unit_tests emulator_tests
  # One ctest for both numerics: the exact ones (every CUDA test) and the hardware-like
  # ones (the cases they can change: tests/CMakeLists.txt's *_hw entries), so that
  # `-j 2` keeps both cores busy to the end.
  (cd build-emu && ctest --output-on-failure --timeout 1800 -j 2 -L cuda)
else
  echo "attnsweep: emulated CUDA device stage SKIPPED: no CUDA headers at ${CUDA_HOME:-/usr/local/cuda}/include"
fi
echo "attnsweep: emulated CUDA device stage took $(( $(date +%s) - t0 )) s"

echo "attnsweep: ASan+UBSan stage"
t0=$(date +%s)
# At -O1, as the sanitizers' documentation advises: the build takes about half as long
# as at -O3 (409 s against 735 s on the 2-core machine), the tests about twice as long,
# which the two unit shards side by side absorb (docs/reliability.md). Built on the
# emulated CUDA device where its headers are: unit_cuda_memcheck then runs a few kernels
# of each family under ASan+UBSan, which see what the emulator's own memcheck cannot (a
# read past a carved piece of a workspace, a misaligned 4-, 8- or 16-byte access; the
# emulated device's memory is plain heap memory of the asked size there).
cuda=OFF memcheck=
if [ -f "${CUDA_HOME:-/usr/local/cuda}/include/cuda_runtime_api.h" ]; then cuda=EMULATE memcheck='|unit_cuda_memcheck'; fi
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
      -DATTNSWEEP_SANITIZE=ON -DATTNSWEEP_CUDA=$cuda -DATTNSWEEP_WERROR=ON \
      -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}"
# Only what the tests below run (not bench/ or trainer_ref_dump).
cmake --build build-asan -j "$(nproc)" --target attnsweep unit_tests
# The integration scripts run $ATTNSWEEP, which ctest sets to build-asan's binary.
(cd build-asan &&
 ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$ROOT/tests/lsan.supp \
 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
 ctest --output-on-failure --timeout 900 -j 2 -R "unit\\.[01]\$|bad_inputs|retries|interrupt$memcheck")
echo "attnsweep: ASan+UBSan stage took $(( $(date +%s) - t0 )) s"

echo "attnsweep: fuzzing"
bash tests/fuzz/run.sh 60
