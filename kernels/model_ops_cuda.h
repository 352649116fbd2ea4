// CUDA backend of kernels/model_ops.h: the same functions, the same argument order,
// device pointers and a trailing stream. All are asynchronous except
// global_norm_cuda, which returns a host value (it synchronises the stream).
// Deterministic: no atomics; the sums over the batch (dwpe, dcls) give each output
// element to one thread, which adds the batch items in order (bit-identical to the CPU);
// the global norm is a fixed-partition float64 reduction (the partition depends on n
// only), so the same gradients give the same bits on every run (not the CPU's bits: the
// partition differs). Implementation: kernels/cuda/model_ops.cu.
#pragma once

#include "kernels/attention_cuda.h"
#include "kernels/ops_cuda.h"  // the plain ops among these (kernels/op_list.h)

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnsweep {

// dst (H, n, hd) = rows rows[0..n) (device int32, each in [0, T)) of src (H, T, hd): one
// sample's query rows, for the norms of its real queries (worker/model/backend_cuda.cpp).
void gather_head_rows_cuda(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t H, int64_t T,
                           int64_t hd, cudaStream_t stream);

// sqrt(sum g^2): per-block float64 partials over a grid fixed by n, then one block adds
// them in a fixed tree; scratch from ws. Synchronises `stream`.
double global_norm_cuda(const float* g, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream);

}  // namespace attnsweep
