// Fused attention backward: the entry point (kernels in attention_fused.cuh).
#include "kernels/cuda/attention_fused.cuh"

#include <stdexcept>

namespace attnsweep {

using namespace cuda::fused;
using cuda::make_mask;
using cuda::score_scale;

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
  cuda::Carver sizing(nullptr);
  sizing.take<float>(BH * sh.Nq);
  sizing.take<int32_t>(sh.B * sh.Nk);
  cuda::Carver carve(ws->reserve(sizing.used()));
  float* dsum = carve.take<float>(BH * sh.Nq);
  int32_t* prefix = carve.take<int32_t>(sh.B * sh.Nk);

  BwdArgs a;
  a.act = spec.act;
  a.mask = make_mask(spec, sh, key_mask, prefix, stream);
  a.H = sh.H;
  a.scale = score_scale(spec, sh);
  a.Q = Q;
  a.K = K;
  a.V = V;
  a.dO = dO;
  a.lse = softmax ? lse : nullptr;
  a.Dsum = softmax ? dsum : nullptr;
  a.dQ = dQ;
  a.dK = dK;
  a.dV = dV;
  dispatch(spec.act.activation, sh.d, dtype, [&](auto a_tag, auto d_tag, auto t_tag) {
    constexpr Activation A = decltype(a_tag)::value;
    constexpr int D = decltype(d_tag)::value;
    using T = decltype(t_tag);
    if constexpr (A == Activation::softmax) {
      const int64_t rows = BH * sh.Nq;
      const int64_t blocks = (rows + kThreads / 32 - 1) / (kThreads / 32);
      softmax_dsum_kernel<D, T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<const T*>(O), static_cast<const T*>(dO), dsum, rows);
      ATTN_CUDA_CHECK_LAUNCH();
    }
    const int64_t nkb = (sh.Nk + Tiles<D>::BN - 1) / Tiles<D>::BN;
    const int64_t nqb = (sh.Nq + Tiles<D>::BM - 1) / Tiles<D>::BM;
    launch(fused_dkdv_kernel<A, D, T>, nkb * BH, sizeof(float) * dkdv_smem_floats<D>(), stream, a);
    launch(fused_dq_kernel<A, D, T>, nqb * BH, sizeof(float) * dq_smem_floats<D>(), stream, a);
  });
}

}  // namespace attnsweep
