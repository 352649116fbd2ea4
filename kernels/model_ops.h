// The data movement of worker/model/model.h that is not a layer of ops.h: head split and
// merge around the attention kernel, token assembly (CLS, positions), the CLS pooling,
// paper B's read-out gathers, and the optimizer's helpers (gradient scale, global norm).
// Same conventions as ops.h: contiguous float32 row-major buffers, shapes in the comment
// above each function, gradients ADDED into unless the comment says "overwrites";
// deterministic for any thread count. CPU implementations in kernels/cpu/model_ops.cpp;
// the CUDA ones (device pointers + stream) in kernels/model_ops_cuda.h.
// The plain ops among them (split_heads, merge_heads, heads_to_rows, rows_to_heads,
// tokens_*, cls_pool_*, masked_meanpool_*, readout_split, readout_merge, readout_pick*,
// scale_inplace) are declared by their rows in the op list, kernels/op_list.h, with their
// shapes; here the rest.
#pragma once

#include <cstdint>

#include "kernels/op_list.h"

namespace attnsweep {

// Padding (worker/model/model.h): mask (B, T) = 1 for the CLS row (t < off) and the tokens
// whose id (ids (B, N), T = N + off) is not pad_id, else 0. Overwrites. Host buffers on
// every backend (the model builds the mask on the host and stages it to its device).
void pad_key_mask(float* mask, const int32_t* ids, int32_t pad_id, int64_t B, int64_t T, int64_t N, int64_t off);

// sqrt(sum g^2) in float64: per-block float64 sums over fixed blocks of 2^14 elements,
// added in block order (the same value for any thread count).
double global_norm(const float* g, int64_t n);

}  // namespace attnsweep
