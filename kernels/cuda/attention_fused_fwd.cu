// Fused attention forward: the entry point (kernels in attention_fused.cuh).
#include "kernels/cuda/attention_fused.cuh"

#include <stdexcept>

namespace attnsweep {

using namespace cuda::fused;
using cuda::FwdArgs;

bool attention_cuda_fused_supported(const AttentionShape& sh) {
  return sh.d == sh.dv && attention_fused_head_width(sh.d);
}

void attention_forward_cuda(const AttentionSpec& spec, const AttentionShape& sh, CudaDType dtype, const void* Q,
                            const void* K, const void* V, const float* key_mask, void* O, float* lse, double* attn_fro,
                            double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  // fp16: only the tensor-core path has it (it throws where unsupported); bf16 by opt-in.
  if (dtype == CudaDType::f16 || attention_cuda_mma_opted_in(sh, dtype)) {
    attention_forward_cuda_mma(spec, sh, dtype, Q, K, V, key_mask, O, lse, attn_fro, jac_fro, ws, stream);
    return;
  }
  const int64_t BH = sh.B * sh.H;
  if (!attention_cuda_fused_supported(sh)) {
    if (dtype == CudaDType::f32) {
      attention_forward_cuda_ref(spec, sh, static_cast<const float*>(Q), static_cast<const float*>(K),
                                 static_cast<const float*>(V), key_mask, static_cast<float*>(O), lse, attn_fro, jac_fro,
                                 ws, stream);
      return;
    }
    const F32Copy q(Q, BH * sh.Nq * sh.d, stream), k(K, BH * sh.Nk * sh.d, stream), v(V, BH * sh.Nk * sh.dv, stream);
    float* o32 = nullptr;
    ATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&o32), sizeof(float) * BH * sh.Nq * sh.dv, stream));
    attention_forward_cuda_ref(spec, sh, q.p, k.p, v.p, key_mask, o32, lse, attn_fro, jac_fro, ws, stream);
    cuda::launch_f32_to_bf16(o32, static_cast<__nv_bfloat16*>(O), BH * sh.Nq * sh.dv, stream);
    ATTN_CUDA_CHECK(cudaFreeAsync(o32, stream));
    return;
  }
  if (BH == 0 || sh.Nq == 0) return;
  if (sh.Nk == 0) throw std::invalid_argument("attention (CUDA fused): Nk == 0 is not supported");
  const bool norms = spec.collect_norms && attn_fro && jac_fro;
  const FwdArgs a = cuda::forward_args(spec, sh, Q, K, V, key_mask, O, lse, norms, ws, stream);
  dispatch(spec.act.activation, sh.d, dtype, [&](auto a_tag, auto d_tag, auto t_tag) {
    constexpr Activation A = decltype(a_tag)::value;
    constexpr int D = decltype(d_tag)::value;
    using T = decltype(t_tag);
    const int64_t nqb = (sh.Nq + Tiles<D>::BM - 1) / Tiles<D>::BM;
    cuda::launch_blocks("attention (CUDA fused)", fused_forward_kernel<A, D, T>, nqb * BH, kThreads, FwdSmem<D>::bytes,
                        stream, a);
  });
  if (norms) cuda::launch_norm_reduce(a.row_attn, a.row_jac, BH, sh.Nq, attn_fro, jac_fro, stream);
}

}  // namespace attnsweep
