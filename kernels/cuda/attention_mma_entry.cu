// Tensor-core attention forward: the entry point (kernels in attention_mma.cuh; one
// instantiation file per (d, type): attention_mma_fwd_d*_*.cu), and the backward
// (attention_mma_bwd.cuh, attention_mma_bwd_d*_bf16.cu).
#include "base/options.h"
#include "kernels/cuda/attention_mma.cuh"
#include "kernels/cuda/attention_mma_bwd.cuh"

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace attnsweep {

bool attention_cuda_mma_supported(const AttentionShape& sh, CudaDType dtype) {
  return (dtype == CudaDType::bf16 || dtype == CudaDType::f16) && sh.d == sh.dv && (sh.d == 64 || sh.d == 128);
}

bool attention_cuda_mma_opted_in(const AttentionShape& sh, CudaDType dtype) {
  static const bool on = options::cuda_mma();  // read once: a run does not change paths
  return on && dtype == CudaDType::bf16 && attention_cuda_mma_supported(sh, dtype);
}

void attention_forward_cuda_mma(const AttentionSpec& spec, const AttentionShape& sh, CudaDType dtype, const void* Q,
                                const void* K, const void* V, const float* key_mask, void* O, float* lse,
                                double* attn_fro, double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (!attention_cuda_mma_supported(sh, dtype))
    throw std::invalid_argument("attention (CUDA mma): needs bf16 or fp16 and d = dv in {64, 128}");
  const int64_t BH = sh.B * sh.H;
  if (BH == 0 || sh.Nq == 0) return;
  if (sh.Nk == 0) throw std::invalid_argument("attention (CUDA mma): Nk == 0 is not supported");
  for (const void* p : {Q, K, V, static_cast<const void*>(O)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument("attention (CUDA mma): Q, K, V, O must be 16-byte aligned");
  const bool norms = spec.collect_norms && attn_fro && jac_fro;
  const cuda::FwdArgs a = cuda::forward_args(spec, sh, Q, K, V, key_mask, O, lse, norms, ws, stream);
  const int64_t blocks = (sh.Nq + cuda::mma::kBM - 1) / cuda::mma::kBM * BH;
  const bool bf16 = dtype == CudaDType::bf16;
  if (sh.d == 64)
    (bf16 ? cuda::mma::forward_d64_bf16 : cuda::mma::forward_d64_f16)(a, norms, blocks, stream);
  else
    (bf16 ? cuda::mma::forward_d128_bf16 : cuda::mma::forward_d128_f16)(a, norms, blocks, stream);
  if (norms) cuda::launch_norm_reduce(a.row_attn, a.row_jac, BH, sh.Nq, attn_fro, jac_fro, stream);
}

void attention_backward_cuda_mma(const AttentionSpec& spec, const AttentionShape& sh, CudaDType dtype, const void* Q,
                                 const void* K, const void* V, const float* key_mask, const void* O, const void* dO,
                                 const float* lse, void* dQ, void* dK, void* dV, AttentionCudaWorkspace* ws,
                                 cudaStream_t stream) {
  if (dtype != CudaDType::bf16 || !attention_cuda_mma_supported(sh, dtype))
    throw std::invalid_argument("attention backward (CUDA mma): needs bf16 and d = dv in {64, 128}");
  const int64_t BH = sh.B * sh.H;
  if (BH == 0) return;
  if (sh.Nq == 0 || sh.Nk == 0) throw std::invalid_argument("attention backward (CUDA mma): Nq == 0 or Nk == 0");
  const bool softmax = spec.act.activation == Activation::softmax;
  if (softmax && (!lse || !O)) throw std::invalid_argument("attention backward (CUDA mma): softmax needs lse and O");
  for (const void* p :
       {Q, K, V, dO, static_cast<const void*>(dQ), static_cast<const void*>(dK), static_cast<const void*>(dV)})
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      throw std::invalid_argument("attention backward (CUDA mma): tensors must be 16-byte aligned");
  const cuda::BwdArgs a = cuda::backward_args(spec, sh, Q, K, V, key_mask, dO, lse, dQ, dK, dV, ws, stream);
  const int64_t rows = BH * sh.Nq;
  if (sh.d == 64) {
    if (softmax) cuda::launch_dsum<64, __nv_bfloat16>(O, dO, a.Dsum, rows, stream);
    cuda::mma::backward_d64_bf16(a, BH, sh.Nq, sh.Nk, stream);
  } else {
    if (softmax) cuda::launch_dsum<128, __nv_bfloat16>(O, dO, a.Dsum, rows, stream);
    cuda::mma::backward_d128_bf16(a, BH, sh.Nq, sh.Nk, stream);
  }
}

}  // namespace attnsweep
