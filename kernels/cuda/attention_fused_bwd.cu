// Fused attention backward: the entry point (kernels in attention_fused.cuh).
#include "kernels/cuda/attention_fused.cuh"

#include <stdexcept>

namespace attnsweep {

using namespace cuda::fused;
using cuda::BwdArgs;

void attention_backward_cuda(const AttentionSpec& spec, const AttentionShape& sh, CudaDType dtype, const void* Q,
                             const void* K, const void* V, const float* key_mask, const void* O, const void* dO,
                             const float* lse, void* dQ, void* dK, void* dV, AttentionCudaWorkspace* ws,
                             cudaStream_t stream) {
  if (dtype == CudaDType::f16)
    throw std::invalid_argument("attention backward (CUDA): fp16 is not implemented (issue #19: tensor-core backward)");
  if (attention_cuda_mma_opted_in(sh, dtype)) {
    attention_backward_cuda_mma(spec, sh, dtype, Q, K, V, key_mask, O, dO, lse, dQ, dK, dV, ws, stream);
    return;
  }
  const int64_t BH = sh.B * sh.H;
  const bool softmax = spec.act.activation == Activation::softmax;
  if (!attention_cuda_fused_supported(sh)) {
    if (dtype == CudaDType::f32) {
      attention_backward_cuda_ref(spec, sh, static_cast<const float*>(Q), static_cast<const float*>(K),
                                  static_cast<const float*>(V), key_mask, static_cast<const float*>(O),
                                  static_cast<const float*>(dO), lse, static_cast<float*>(dQ), static_cast<float*>(dK),
                                  static_cast<float*>(dV), ws, stream);
      return;
    }
    const int64_t nq = BH * sh.Nq, nk = BH * sh.Nk;
    const F32Copy q(Q, nq * sh.d, stream), k(K, nk * sh.d, stream), v(V, nk * sh.dv, stream), o(O, nq * sh.dv, stream),
        dout(dO, nq * sh.dv, stream);
    float* grads = nullptr;
    const int64_t ng = nq * sh.d + nk * sh.d + nk * sh.dv;
    ATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&grads), sizeof(float) * ng, stream));
    float* dq32 = grads;
    float* dk32 = dq32 + nq * sh.d;
    float* dv32 = dk32 + nk * sh.d;
    attention_backward_cuda_ref(spec, sh, q.p, k.p, v.p, key_mask, o.p, dout.p, lse, dq32, dk32, dv32, ws, stream);
    cuda::launch_f32_to_bf16(dq32, static_cast<__nv_bfloat16*>(dQ), nq * sh.d, stream);
    cuda::launch_f32_to_bf16(dk32, static_cast<__nv_bfloat16*>(dK), nk * sh.d, stream);
    cuda::launch_f32_to_bf16(dv32, static_cast<__nv_bfloat16*>(dV), nk * sh.dv, stream);
    ATTN_CUDA_CHECK(cudaFreeAsync(grads, stream));
    return;
  }
  if (BH == 0) return;
  if (sh.Nq == 0 || sh.Nk == 0) throw std::invalid_argument("attention (CUDA fused): Nq == 0 or Nk == 0");
  if (softmax && (!lse || !O)) throw std::invalid_argument("attention backward (CUDA fused): softmax needs lse and O");
  const BwdArgs a = cuda::backward_args(spec, sh, Q, K, V, key_mask, dO, lse, dQ, dK, dV, ws, stream);
  dispatch(spec.act.activation, sh.d, dtype, [&](auto a_tag, auto d_tag, auto t_tag) {
    constexpr Activation A = decltype(a_tag)::value;
    constexpr int D = decltype(d_tag)::value;
    using T = decltype(t_tag);
    if constexpr (A == Activation::softmax) cuda::launch_dsum<D, T>(O, dO, a.Dsum, BH * sh.Nq, stream);
    const int64_t nkb = (sh.Nk + Tiles<D>::BN - 1) / Tiles<D>::BN;
    const int64_t nqb = (sh.Nq + Tiles<D>::BM - 1) / Tiles<D>::BM;
    const char* what = "attention backward (CUDA fused)";
    cuda::launch_blocks(what, fused_dkdv_kernel<A, D, T>, nkb * BH, kThreads, DkdvSmem<D>::bytes, stream, a);
    cuda::launch_blocks(what, fused_dq_kernel<A, D, T>, nqb * BH, kThreads, DqSmem<D>::bytes, stream, a);
  });
}

}  // namespace attnsweep
