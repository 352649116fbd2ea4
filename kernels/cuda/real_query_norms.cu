// kernels/real_query_norms_cuda.h: each sample's real query rows gathered on the device
// (gather_head_rows_cuda), then the backend's attention over them for their norms.
#include "kernels/cuda/check.cuh"
#include "kernels/model_ops_cuda.h"
#include "kernels/real_query_norms_cuda.h"

namespace attnsweep {

void norms_of_real_queries_cuda(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                const RealQueryRows& rows, const float* q, const float* k, const float* v,
                                double* attn_fro, double* jac_fro, int32_t* rows_dev, float* buf,
                                const RealQueryAttention& attend, cudaStream_t stream) {
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  if (!rows.rows.empty())
    ATTN_CUDA_CHECK(cudaMemcpyAsync(rows_dev, rows.rows.data(), rows.rows.size() * sizeof(int32_t),
                                    cudaMemcpyHostToDevice, stream));
  // q rows, then o and lse of up to T rows per head.
  const size_t q_floats = static_cast<size_t>(H * T * hd);
  float* qrows = buf;
  float* orows = buf + q_floats;
  float* lse = buf + 2 * q_floats;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = rows.first[static_cast<size_t>(b + 1)] - rows.first[static_cast<size_t>(b)];
    if (n == 0) {
      ATTN_CUDA_CHECK(cudaMemsetAsync(attn_fro + b * H, 0, static_cast<size_t>(H) * sizeof(double), stream));
      ATTN_CUDA_CHECK(cudaMemsetAsync(jac_fro + b * H, 0, static_cast<size_t>(H) * sizeof(double), stream));
      continue;
    }
    gather_head_rows_cuda(qrows, q + b * H * T * hd, rows_dev + rows.first[static_cast<size_t>(b)], n, H, T, hd,
                          stream);
    const AttentionShape one{1, H, n, T, hd, hd};
    attend(spec, one, qrows, k + b * H * T * hd, v + b * H * T * hd, key_mask + b * T, orows, lse, attn_fro + b * H,
           jac_fro + b * H);
  }
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));  // rows.rows (host) is read by the copy above
}

}  // namespace attnsweep
