// Tensor-core attention forward, d = 128, bf16: every activation variant of this
// (d, type) (attention_mma.cuh). One (d, type) per file so that the build parallelises.
#include "kernels/cuda/attention_mma.cuh"

namespace attnsweep::cuda::mma {

void forward_d128_bf16(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream) {
  forward_variants<128, __nv_bfloat16>(args, norms, blocks, stream);
}

}  // namespace attnsweep::cuda::mma
