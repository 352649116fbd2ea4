// Tensor-core attention backward, d = 128, bf16: every activation variant
// (attention_mma_bwd.cuh). One (d, type) per file so that the build parallelises.
#include "kernels/cuda/attention_mma_bwd.cuh"

namespace attnsweep::cuda::mma {

void backward_d128_bf16(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream) {
  backward_variants<128, __nv_bfloat16>(args, BH, Nq, Nk, stream);
}

}  // namespace attnsweep::cuda::mma
