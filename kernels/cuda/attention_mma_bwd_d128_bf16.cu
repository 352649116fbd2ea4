// Tensor-core attention backward, d = 128, bf16: every activation variant
// (attention_mma_bwd.cuh). One (d, type) per file so that the build parallelises.
#include "kernels/cuda/attention_mma_bwd.cuh"

namespace attnsweep::cuda::mma {

void backward_d128_bf16(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream) {
  backward_variants<128, __nv_bfloat16>(args, BH, Nq, Nk, stream);
}

void dsum_d128_bf16(const void* O, const void* dO, float* Dsum, int64_t rows, cudaStream_t stream) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + 7) / 8;
  mma_dsum_kernel<128, __nv_bfloat16><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      static_cast<const __nv_bfloat16*>(O), static_cast<const __nv_bfloat16*>(dO), Dsum, rows);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace attnsweep::cuda::mma
