// The CUDA side of kernels/real_query_norms.h: the norms of each sample's real query rows
// on the device, with the rows chosen on the host by real_query_rows.
// Implementation: kernels/cuda/real_query_norms.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "kernels/real_query_norms.h"

namespace attnsweep {

// The attention the norms are taken with: the model backend's forward on float32 device
// buffers (so at the backend's precision), with the arguments of its member
// attention_forward (worker/model/backend_cuda.h).
using RealQueryAttention =
    std::function<void(const AttentionSpec& spec, const AttentionShape& shape, const float* q, const float* k,
                       const float* v, const float* key_mask, float* o, float* lse, double* attn_fro, double* jac_fro)>;

// attn_fro, jac_fro (B, H) (device) = the norms of `attend` over each sample's real query
// rows `rows` (real_query_rows of the host copy of key_mask; 0 for a sample with none).
// key_mask, q, k, v device buffers as in kernels/real_query_norms.h. Scratch (device):
// rows_dev of real_query_rows_bytes(rows.rows.size()), buf of real_query_buf_bytes. Queued on
// `stream`, which it synchronises before returning (the copy of rows.rows reads the host).
void norms_of_real_queries_cuda(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                const RealQueryRows& rows, const float* q, const float* k, const float* v,
                                double* attn_fro, double* jac_fro, int32_t* rows_dev, float* buf,
                                const RealQueryAttention& attend, cudaStream_t stream);

}  // namespace attnsweep
