#!/usr/bin/env bash
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]
# Builds the libFuzzer targets (clang, ASan+UBSan) into build-fuzz/ and runs each for
# SECONDS (default 60), both (or the TARGETs named) at once (one core each), starting from the seed corpus in
# tests/fuzz/corpus/<target>/. Prints executions and time per target. Exits non-zero on
# a finding; the input that caused it is kept in build-fuzz/findings/ (reproduce with
# `build-fuzz/fuzz_grid FILE`; add it to the corpus once fixed).
# New inputs found go to build-fuzz/corpus/, not to the committed corpus.
set -uo pipefail
cd "$(dirname "$0")/../.."
SECONDS_PER_TARGET=${1:-60}
shift $(( $# > 0 ? 1 : 0 ))
TARGETS=(fuzz_grid fuzz_result_file)
[ $# -eq 0 ] || TARGETS=("$@")
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
# One target for SECONDS. A report (crash, sanitizer, timeout) whose innermost frame is in
# libhdf5 (not instrumented, not ours: tests/fuzz/known/) is counted, its input kept in
# findings/known/, and fuzzing goes on for the time left; anything else stops the target
# as a finding.
fuzz() {
  local t=$1 start now left rc=0 execs=0 e known=0 frame
  start=$(date +%s)
  : >$B/$t.log
  while now=$(date +%s); left=$((start + SECONDS_PER_TARGET - now)); [ $left -gt 0 ]; do
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=${ASAN[$t]} LSAN_OPTIONS=${LSAN[$t]} \
      $B/$t -max_total_time=$left -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
            -artifact_prefix=$B/findings/$t- $B/corpus/$t "${SEEDS[$t]}" >$B/$t.last.log 2>&1
    rc=$?
    cat $B/$t.last.log >>$B/$t.log
    e=$(sed -n 's/^stat::number_of_executed_units: *//p' $B/$t.last.log | tail -1)
    execs=$((execs + ${e:-0}))
    # The first frame of the report that is libhdf5 or source code (not the sanitizer or
    # libFuzzer runtime, not an interceptor): libhdf5 -> known, not ours.
    # (Read into a variable: with pipefail, grep -m1 closing the pipe early made sed's
    # SIGPIPE fail the whole test at random, so a libhdf5 report could stop the target.)
    frame=""
    # (libFuzzer's own reports read "==PID== ERROR: libFuzzer: out-of-memory (malloc(N))",
    # with a space; ASan's "==PID==ERROR".)
    [ $rc -ne 0 ] && frame=$(sed -n '/==ERROR\|== ERROR\|ALARM: working on the last Unit/,$p' $B/$t.last.log |
                             grep -m1 -E '^ +#[0-9]+ .*(libhdf5|\.(cpp|h|hpp):[0-9]+)' || true)
    if [[ "$frame" == *libhdf5* ]]; then
      known=$((known + 1)) rc=0
      mkdir -p $B/findings/known && mv $B/findings/$t-* $B/findings/known/ 2>/dev/null
      continue
    fi
    break
  done
  echo "$rc $execs $(( $(date +%s) - start )) $known" >$B/$t.result
}

pids=()
for t in "${TARGETS[@]}"; do
  mkdir -p $B/corpus/$t
  fuzz $t &
  pids+=($!)
done
wait "${pids[@]}"

status=0
for t in "${TARGETS[@]}"; do
  read -r rc execs secs known <$B/$t.result
  cov=$(grep -o 'cov: [0-9]*' $B/$t.log | tail -1)
  note=""; [ "$known" -gt 0 ] && note=", $known known libhdf5 report(s) skipped (inputs in $B/findings/known/)"
  if [ "$rc" = 0 ]; then
    echo "fuzz: $t: $execs executions in $secs s (${cov:-cov: ?}, corpus $(ls $B/corpus/$t | wc -l) new inputs), no findings$note"
  else
    status=1
    echo "fuzz: $t: FINDING (exit $rc) after $execs executions in $secs s$note; log $B/$t.log; input:"
    ls -1 $B/findings/$t-* 2>/dev/null | sed 's/^/  /'
    grep -m1 -A30 -E '^==[0-9]+== ?ERROR|runtime error|unexpected exception|threw|deadly signal|mismatch|rejected|not stable|ALARM' $B/$t.last.log
  fi
done
exit $status
