#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan+UBSan) into build-fuzz/ and runs each for
# SECONDS (default 60), both at once (one core each), starting from the seed corpus in
# tests/fuzz/corpus/<target>/. Prints executions and time per target. Exits non-zero on
# a finding; the input that caused it is kept in build-fuzz/findings/ (reproduce with
# `build-fuzz/fuzz_grid FILE`; add it to the corpus once fixed).
# New inputs found go to build-fuzz/corpus/, not to the committed corpus.
set -uo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-60}
B=build-fuzz
cmake -S tests/fuzz -B $B -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null || exit 1
cmake --build $B -j 2 || exit 1

declare -A SEEDS=([fuzz_grid]=tests/fuzz/corpus/grid [fuzz_result_file]=tests/fuzz/corpus/result)
# libhdf5 (not instrumented) sizes some allocations from the file: a corrupt length asks
# malloc for exabytes, which ASan reports unless malloc may return null, as glibc's does
# (HDF5 then fails cleanly: corpus/result/regress_hdf5_huge_alloc.h5). Its error paths
# leak a little: tests/fuzz/lsan_hdf5.supp.
declare -A ASAN=([fuzz_grid]=detect_leaks=1 [fuzz_result_file]=detect_leaks=1:allocator_may_return_null=1)
declare -A LSAN=([fuzz_grid]= [fuzz_result_file]=suppressions=$PWD/tests/fuzz/lsan_hdf5.supp)
mkdir -p $B/findings
pids=()
for t in fuzz_grid fuzz_result_file; do
  mkdir -p $B/corpus/$t
  # -timeout: an input taking longer is a finding (a hang); -rss_limit_mb: likewise memory.
  # halt_on_error: a UBSan report is a finding, not a line in the log.
  ( start=$(date +%s.%N)
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=${ASAN[$t]} LSAN_OPTIONS=${LSAN[$t]} \
      $B/$t -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
            -artifact_prefix=$B/findings/$t- $B/corpus/$t "${SEEDS[$t]}" >$B/$t.log 2>&1
    echo $? >$B/$t.rc
    echo "$start $(date +%s.%N)" >$B/$t.time ) &
  pids+=($!)
done
wait "${pids[@]}"

status=0
for t in fuzz_grid fuzz_result_file; do
  rc=$(cat $B/$t.rc)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' $B/$t.log | tail -1)
  secs=$(awk '{printf "%.0f", $2 - $1}' $B/$t.time)
  cov=$(grep -o 'cov: [0-9]*' $B/$t.log | tail -1)
  if [ "$rc" = 0 ]; then
    echo "fuzz: $t: ${execs:-?} executions in ${secs} s (${cov:-cov: ?}, corpus $(ls $B/corpus/$t | wc -l) new inputs), no findings"
  else
    status=1
    echo "fuzz: $t: FINDING (exit $rc) after ${execs:-?} executions in ${secs} s; log $B/$t.log; input:"
    ls -1 $B/findings/$t-* 2>/dev/null | sed 's/^/  /'
    grep -m1 -A30 -E '^==[0-9]+==ERROR|runtime error|unexpected exception|threw|deadly signal|mismatch|rejected|not stable' $B/$t.log
  fi
done
exit $status
