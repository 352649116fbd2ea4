#!/usr/bin/env bash
# Breaks the CUDA code on purpose, one mistake at a time, and shows that an emulated test
# fails on each (docs/cuda-emulator.md, "Deliberate breakages"). Not a ctest: it edits
# sources and rebuilds (about 1-2 minutes a breakage on 2 cores), then restores each
# file with `git checkout`, so run it on a clean tree:
#   bash tests/emulator/breakages.sh [BUILD_DIR=build-emu] [NAME...]  > breakages.log
# Prints, per breakage, the test filter, its exit code and the first lines of the failure.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD_DIR:-build-emu}
export ATTNSWEEP_EMULATED_GPUS=2
# In an ASan+UBSan build (scripts/test.sh's reliability stage), UBSan's first report ends the run.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
if [ -n "$(git status --porcelain -- kernels worker experiments)" ]; then
  echo "breakages.sh: kernels/, worker/ or experiments/ has uncommitted changes; it restores files with git checkout" >&2
  exit 2
fi

# name | file | python expression of the edit (s: the file's text) | gtest filter
BREAKAGES=(
  "syncthreads_removed|kernels/cuda/attention_mma.cuh|s.replace('    cp_async_wait<1>();\n    __syncthreads();\n    body(t, t & 1);', '    cp_async_wait<1>();\n    body(t, t & 1);', 1)|Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*"
  "ldmatrix_trans_dropped|kernels/cuda/attention_mma.cuh|s.replace('ldmatrix_x4_trans(xf,', 'ldmatrix_x4(xf,', 1)|Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*"
  "causal_limit_off_by_one|kernels/cuda/attention_common.cuh|s.replace('const int64_t e = i + (Nk - Nq) + 1;', 'const int64_t e = i + (Nk - Nq) + 2;', 1)|Shapes/AttentionCuda.RefAndFusedMatchCpu/softmax_q129_k129_d64_causal"
  "event_wait_removed|worker/model/backend_cuda.cpp|s.replace('  cuda_check(cudaStreamWaitEvent(stream_, other.order_, 0), \"cudaStreamWaitEvent (order)\");\n', '', 1)|CellGroupCuda.*"
  "cp_async_read_before_wait|kernels/cuda/attention_mma.cuh|s.replace('    cp_async_wait<1>();\n    __syncthreads();\n    body(t, t & 1);', '    cp_async_wait<2>();\n    __syncthreads();\n    body(t, t & 1);', 1)|Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*"
  "mma_b_fragments_swapped|kernels/cuda/attention_mma.cuh|s.replace('mma16816<T>(s[2 * nn], qf[kk], kf[0], kf[1]);', 'mma16816<T>(s[2 * nn], qf[kk], kf[1], kf[0]);', 1)|Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*"
  "read_one_past_buffer|kernels/cuda/losses.cu|s.replace('+ tid; i < n;', '+ tid; i <= n;', 1)|OpsCuda.MseForwardMatchesCpu"
  "fused_tile_barrier_removed|kernels/cuda/attention_fused.cuh|s.replace(\"    __syncthreads();  // the previous tile's K, V, P are consumed\\n\", '', 1)|Shapes/AttentionCuda.RefAndFusedMatchCpu/softmax_q129_k129_d64"
  "map_kernel_starts_one_below_zero|kernels/cuda/launch.cuh|s.replace('static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;', 'static_cast<int64_t>(blockDim.x) + threadIdx.x - 1; i < n;', 1)|OpsCuda.*:CrossBackendOps.*"
  "rn_multiply_contracted|experiments/icl_prompts.cu|s.replace('return __fmul_rn(a.v, b.v);', 'return a.v * b.v;', 1)|IclPromptsCuda.*"
  "conversion_without_grid_stride|kernels/cuda/attention_common.cu|s.replace('  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;\n       i += static_cast<int64_t>(gridDim.x) * blockDim.x)\n    out[i] = __float2bfloat16(in[i]);', '  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;\n  if (i < n) out[i] = __float2bfloat16(in[i]);', 1)|OpsCuda.Bf16Conv*"
  "dsum_warp_sum_skips_last_step|kernels/cuda/attention_common.cuh|s.replace('for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);', 'for (int o = 16; o > 1; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);', 1)|Shapes/AttentionCuda.*softmax_q129_k129_d64*"
  "half_warp_sum_width_32|kernels/cuda/attention_fused.cuh|s.replace('v += __shfl_xor_sync(0xffffffffu, v, o, 16);', 'v += __shfl_xor_sync(0xffffffffu, v, o, 32);', 1)|Shapes/AttentionCuda.*"
  "half_warp_max_from_offset_4|kernels/cuda/attention_fused.cuh|s.replace('for (int o = 8; o > 0; o >>= 1) v = fmaxf(', 'for (int o = 4; o > 0; o >>= 1) v = fmaxf(', 1)|Shapes/AttentionCuda.*"
  "argmax_ties_to_the_last|kernels/cuda/losses.cu|s.replace('(ob == best && oa < arg)', '(ob == best && oa > arg)', 1)|OpsCuda.*:CrossBackendOps.*"
  "readout_warp_sum_from_offset_8|kernels/cuda/readout.cu|s.replace('for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);', 'for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);', 1)|ReadoutAlgebraCuda.*"
  "mma_stage_buffer_fixed|kernels/cuda/attention_mma.cuh|s.replace('body(t, t & 1);', 'body(t, 0);', 1)|Shapes/AttentionCudaMma.ForwardMatchesCpu/softmax_q129_k129_d64*"
  "prefix_scan_middle_barrier_removed|kernels/cuda/attention_common.cu|s.replace('    const int32_t add = tid >= off ? sums[tid - off] : 0;\n    __syncthreads();\n', '    const int32_t add = tid >= off ? sums[tid - off] : 0;\n', 1)|Shapes/AttentionCuda.*mask*"
  "mask_count_ignores_padding|kernels/cuda/attention_common.cu|s.replace('count += key_mask[b * Nk + j] != 0.0f;', 'count += 1;', 1)|Shapes/AttentionCuda.*mask*"
  "adamw_bias_corrections_swapped|kernels/cuda/optimizer.cu|s.replace('const double mhat = mi / c1, vhat = vi / c2;', 'const double mhat = mi / c2, vhat = vi / c1;', 1)|OpsCuda.*:CrossBackendOps.*"
  "gemm_lda_for_ldb|kernels/cuda/matmul.cu|s.replace('cublasSgemm(ws->cublas, ta, tb, m, n, k, &alpha, A, lda, B, ldb,', 'cublasSgemm(ws->cublas, ta, tb, m, n, k, &alpha, A, ldb, B, ldb,', 1)|OpsCuda.*:CrossBackendOps.*"
  "embedding_tile_barrier_removed|kernels/cuda/embedding.cu|s.replace('    __syncthreads();  // the previous tile is consumed\n', '', 1)|OpsCuda.*:CrossBackendOps.*"
  "carver_pieces_unaligned|kernels/scratch.h|s.replace('taken = (bytes + 255) / 256 * 256 + kGuardBytes;', 'taken = bytes;', 1)|CrossBackendOps.*:OpsCuda.*:ReadoutAlgebraCuda.CellsInOneCall*:Shapes/AttentionCuda.RefAndFusedMatchCpu/softmax_q129_k129_d64_mask_causal"
  "bf16_store_round_toward_zero|kernels/cuda/attention_fused.cuh|s.replace('*p = __float2bfloat16(v);', '*p = __float2bfloat16_rz(v);', 1)|Shapes/AttentionCuda.*"
  "block_reduce_last_barrier_removed|kernels/cuda/attention_ref.cu|s.replace('  const T r = scratch[0];\n  __syncthreads();\n', '  const T r = scratch[0];\n', 1)|Shapes/AttentionCuda.*"
  "readout_pred_barrier_removed|kernels/cuda/readout.cu|s.replace('  __syncthreads();\n  if (!a.train) return;\n', '  if (!a.train) return;\n', 1)|ReadoutAlgebraCuda.*"
  "launch_above_its_bounds|kernels/cuda/launch.cuh|s.replace('ATTN_LAUNCH(map_blocks(n), kMapThreads, 0, stream, map_kernel<F>)', 'ATTN_LAUNCH(map_blocks(n), 2 * kMapThreads, 0, stream, map_kernel<F>)', 1)|OpsCuda.*:CrossBackendOps.*"
  "host_rows_for_device_rows|kernels/cuda/real_query_norms.cu|s.replace('rows_dev + rows.first[static_cast<size_t>(b)], n, H, T, hd,', 'rows.rows.data() + rows.first[static_cast<size_t>(b)], n, H, T, hd,', 1)|CudaModel.LossNormsAndGradientsMatchCpu"
  "pinned_batch_overwritten_before_its_copy|worker/model/backend_cuda.cpp|s.replace('    cuda_check(cudaEventSynchronize(s.copied), \"cudaEventSynchronize\");\n', '', 1)|CudaBackendInputs.*:CudaTrainerTest.MatchesCpuTrajectoryFor50Steps"
)

want=("$@")
for entry in "${BREAKAGES[@]}"; do
  IFS='|' read -r name file edit filter <<<"$entry"
  if [ ${#want[@]} -gt 0 ] && [[ ! " ${want[*]} " =~ " $name " ]]; then continue; fi
  echo "=== $name: $file; ctest filter $filter"
  /usr/bin/python3 - "$file" "$edit" <<'PY'
import sys
path, edit = sys.argv[1], sys.argv[2]
s = open(path).read()
t = eval(edit, {"s": s})
if t == s:
    sys.exit(f"breakages.sh: the edit did not apply to {path}")
open(path, "w").write(t)
PY
  if [ $? -ne 0 ]; then git checkout -- "$file"; echo "RESULT $name: edit did not apply"; continue; fi
  if ! cmake --build "$BUILD" --target unit_tests >/tmp/breakage-build.log 2>&1; then
    tail -5 /tmp/breakage-build.log
    git checkout -- "$file"
    echo "RESULT $name: did not build"
    continue
  fi
  timeout 900 "$BUILD/tests/unit_tests" --gtest_filter="$filter" >/tmp/breakage-test.log 2>&1
  rc=$?
  grep -m 3 -E "attnsweep emulator:|Failure|Expected|Which is|exception|differ|rel|runtime error" /tmp/breakage-test.log | cut -c1-400
  echo "RESULT $name: exit $rc ($( [ $rc -ne 0 ] && echo 'a test failed, as it must' || echo 'NO TEST FAILED'))"
  git checkout -- "$file"
done
# Restore the build to the tree's sources.
cmake --build "$BUILD" --target unit_tests >/dev/null 2>&1
