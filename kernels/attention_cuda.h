// CUDA backend of attention.h: the same math (activation.h), the same argument order as
// attention_forward_cpu / attention_backward_cpu, device pointers, plus a workspace and
// a stream. Two implementations:
//   *_cuda_ref  materialising: cuBLAS strided-batched GEMMs for S = Q K^T * scale,
//               O = P V and the backward products, element-wise kernels for phi,
//               softmax and the norms. Float32 only. The GPU oracle.
//   *_cuda      fused, FlashAttention-2 style (S never leaves the chip), float32 or
//               bfloat16 inputs with float32 accumulation; falls back to the
//               materialising path where it has no specialisation (d not in
//               {16, 32, 64, 128}, or dv != d).
//   *_cuda_mma  tensor cores (mma.sync m16n8k16, issue #19 step 1): forward only, bf16
//               or fp16, d = dv in {64, 128} (kernels/cuda/attention_mma.cuh). The same
//               outputs as the fused forward; its O and lse feed attention_backward_cuda
//               (bf16). attention_forward_cuda takes it for fp16 (the only fp16 path);
//               bf16 through attention_forward_cuda / attention_backward_cuda stays on
//               the fused kernels until the tensor-core kernels have been checked on a
//               GPU, unless ATTNSWEEP_CUDA_MMA=1 (read once; then bf16 at d = dv in
//               {64, 128} takes the tensor-core forward and backward, so the whole
//               AttentionCuda suite can be run against them).
// Both are deterministic: the norms are reduced from per-row partials in a fixed order
// by a second kernel, and the backward uses no atomics.
// Layouts as attention.h: Q [B,H,Nq,d], K [B,H,Nk,d], V [B,H,Nk,dv], O/dO [B,H,Nq,dv],
// key_mask [B,Nk] (float, nonzero = attend; may be null), lse [B,H,Nq] (softmax; may be
// null otherwise), attn_fro / jac_fro [B,H] float64 (written when spec.collect_norms).
// A row that attends no key outputs 0, has lse = -inf, and contributes 0 to the norms.
// Errors (CUDA or cuBLAS) throw std::runtime_error naming the call.
#pragma once

#include "kernels/attention.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace attnsweep {

// Element type of Q, K, V, O, dO, dQ, dK, dV in the fused path (accumulation is float32).
// f16 (__half): the tensor-core forward only (attention_forward_cuda_mma); the fused
// backward and the materialising fallback reject it.
enum class CudaDType : int32_t { f32 = 0, bf16 = 1, f16 = 2 };

// cuBLAS handle and scratch memory, grown on demand. One per stream (not thread-safe).
struct AttentionCudaWorkspace;
AttentionCudaWorkspace* attention_cuda_workspace_create();
void attention_cuda_workspace_destroy(AttentionCudaWorkspace* ws);
// Changes whenever the workspace's device memory is reallocated (CudaBackend's step graph).
uint64_t attention_cuda_workspace_epoch(const AttentionCudaWorkspace* ws);
// Grows the workspace's scratch to hold a request of `bytes` (to 1.25x it, as a kernel's
// request would) before any kernel asks: a caller that knows its largest request
// (worker/model/device_memory.h) keeps the steps from growing it.
void attention_cuda_workspace_reserve(AttentionCudaWorkspace* ws, size_t bytes);

// ---- materialising path (float32) ---------------------------------------------------
// Scratch: two [B,H,Nq,Nk] float32 matrices; use it for checks, not for long prompts.
void attention_forward_cuda_ref(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                                const float* V, const float* key_mask, float* O, float* lse, double* attn_fro,
                                double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream);

void attention_backward_cuda_ref(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                                 const float* V, const float* key_mask, const float* O, const float* dO,
                                 const float* lse, float* dQ, float* dK, float* dV, AttentionCudaWorkspace* ws,
                                 cudaStream_t stream);

// ---- fused path -----------------------------------------------------------------------
// Q, K, V, O, dO, dQ, dK, dV point to elements of type `dtype` (float or __nv_bfloat16);
// key_mask, lse and the norms are float32 / float64 as above. The softmax backward reads
// lse and O (D_i = dO_i . O_i); the element-wise backward reads neither.
bool attention_cuda_fused_supported(const AttentionShape& shape);  // else *_cuda falls back

void attention_forward_cuda(const AttentionSpec& spec, const AttentionShape& shape, CudaDType dtype, const void* Q,
                            const void* K, const void* V, const float* key_mask, void* O, float* lse, double* attn_fro,
                            double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream);

void attention_backward_cuda(const AttentionSpec& spec, const AttentionShape& shape, CudaDType dtype, const void* Q,
                             const void* K, const void* V, const float* key_mask, const void* O, const void* dO,
                             const float* lse, void* dQ, void* dK, void* dV, AttentionCudaWorkspace* ws,
                             cudaStream_t stream);

// ---- tensor-core path (forward) ---------------------------------------------------------
// The arguments of attention_forward_cuda; dtype bf16 or f16 (Q, K, V, O), pointers
// 16-byte aligned; throws std::invalid_argument where !attention_cuda_mma_supported.
bool attention_cuda_mma_supported(const AttentionShape& shape, CudaDType dtype);
// ATTNSWEEP_CUDA_MMA=1 in the environment and dtype bf16 and supported.
bool attention_cuda_mma_opted_in(const AttentionShape& shape, CudaDType dtype);

void attention_forward_cuda_mma(const AttentionSpec& spec, const AttentionShape& shape, CudaDType dtype, const void* Q,
                                const void* K, const void* V, const float* key_mask, void* O, float* lse,
                                double* attn_fro, double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream);

// Backward on tensor cores (issue #19 step 4, compiled only so far): bf16, d = dv in
// {64, 128}, the arguments of attention_backward_cuda; deterministic (no atomics).
// Not reached from attention_backward_cuda until checked on a GPU.
void attention_backward_cuda_mma(const AttentionSpec& spec, const AttentionShape& shape, CudaDType dtype, const void* Q,
                                 const void* K, const void* V, const float* key_mask, const void* O, const void* dO,
                                 const float* lse, void* dQ, void* dK, void* dV, AttentionCudaWorkspace* ws,
                                 cudaStream_t stream);

}  // namespace attnsweep
