// The attention norms of the real queries only, with a key mask (padding). The attention
// kernels mask keys, not queries: the rows of padding queries are in the norms they
// write (attn_fro, jac_fro). On logged steps only, the model backends compute the
// attention of each sample's real query rows (CLS and tokens) again for their norms,
// from q gathered into [1, H, n_b, hd], and overwrite attn_fro, jac_fro (B, H) with them.
// Self-attention: shape (B, H, T, T, hd, hd), q, k, v (B, H, T, hd), key_mask (B, T).
// The rows are chosen here (real_query_rows), once for both backends; the CPU's version
// is norms_of_real_queries_cpu (kernels/cpu/real_query_norms.cpp), the CUDA one
// norms_of_real_queries_cuda (kernels/real_query_norms_cuda.h, kernels/cuda/real_query_norms.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/attention.h"

namespace attnsweep {

// Sample b's real query rows (the t with key_mask[b, t] != 0, in order) are
// rows[first[b] .. first[b + 1]); first has B + 1 entries. key_mask (B, T) on the host.
struct RealQueryRows {
  std::vector<int32_t> rows;
  std::vector<int64_t> first;
};
RealQueryRows real_query_rows(const float* key_mask, int64_t B, int64_t T);

// The device scratch of norms_of_real_queries_cuda: the real query rows of all B samples
// (`rows` of them, at most B T; int32), and one sample's q rows, o rows and lse for every
// head (floats).
inline int64_t real_query_rows_bytes(int64_t rows) {
  return (rows > 1 ? rows : 1) * int64_t{4};
}
inline int64_t real_query_buf_bytes(int64_t H, int64_t T, int64_t hd) {
  return (2 * H * T * hd + H * T) * int64_t{4};
}

// attn_fro, jac_fro (B, H) = the norms of attention_forward_cpu over each sample's real
// query rows (0 for a sample with none). Host buffers.
void norms_of_real_queries_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                               const float* q, const float* k, const float* v, double* attn_fro, double* jac_fro);

}  // namespace attnsweep
