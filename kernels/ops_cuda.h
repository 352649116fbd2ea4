// CUDA backend of kernels/ops.h: every op with the CPU argument order, device pointers,
// and a trailing cudaStream_t (llm.c style). Ops that need cuBLAS or scratch memory take
// an AttentionCudaWorkspace (attention_cuda.h: the one cuBLAS handle, in
// CUBLAS_PEDANTIC_MATH, i.e. plain FP32 without TF32, plus device scratch grown on
// demand) just before the stream. One workspace per stream; scratch is reused by the next
// call on the same workspace, which stream order makes safe.
// Same semantics as the CPU ops (ops.h):
// - backward functions ADD into their gradient outputs; the same pointers may be null.
// - deterministic: no floating-point atomics. Reductions across rows (dbias, dweight of
//   layernorm, the losses) are per-block float64 partials, reduced in a fixed order; the
//   partition depends only on the shape, never on the device or the run. Per-row sums
//   (layernorm, softmax) are float64 warp butterflies. Scatter-adds (dwte, dwpe) give
//   every output element to one thread, which adds in token order, as the CPU does.
// - matmul products come from cuBLAS (FP32, deterministic for a fixed GPU model, cuBLAS
//   version and stream); results match the CPU to rounding, not bit for bit.
// - the two losses return host values: they copy the result back and synchronise the
//   stream (cudaStreamSynchronize) before returning. Every other op is asynchronous.
// Errors (CUDA or cuBLAS launch/config) throw std::runtime_error naming the call; matmul
// dimensions above INT_MAX throw std::invalid_argument.
// The plain ops (kernels/op_list.h: those both model backends forward one to one) are
// declared here from their rows in that list, with their shapes there; below, the rest.
// Implementation: one file per family, kernels/cuda/<family>.cu (matmul, layernorm,
// elementwise, pooling, losses, embedding, optimizer; kernels/cuda/reduce.cuh), each beside
// its CPU twin kernels/cpu/<family>.cpp.
#pragma once

#include "kernels/attention_cuda.h"
#include "kernels/op_list.h"
#include "kernels/precision.h"
#include "kernels/scratch.h"  // CudaScalarSum

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnsweep {

// The CUDA declarations of the plain ops (kernels/op_list.h): name_cuda(params..., stream),
// or name_cuda(params..., ws, stream) for the rows entered as X_WS.
#define ATTNSWEEP_CUDA_PARAMS(...) (__VA_ARGS__, cudaStream_t stream)
#define ATTNSWEEP_CUDA_PARAMS_WS(...) (__VA_ARGS__, AttentionCudaWorkspace * ws, cudaStream_t stream)
#define ATTNSWEEP_DECLARE_CUDA_OP(name, params) void name##_cuda ATTNSWEEP_CUDA_PARAMS params;
#define ATTNSWEEP_DECLARE_CUDA_OP_WS(name, params) void name##_cuda ATTNSWEEP_CUDA_PARAMS_WS params;
ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_DECLARE_CUDA_OP, ATTNSWEEP_DECLARE_CUDA_OP_WS)
#undef ATTNSWEEP_DECLARE_CUDA_OP
#undef ATTNSWEEP_DECLARE_CUDA_OP_WS
#undef ATTNSWEEP_CUDA_PARAMS
#undef ATTNSWEEP_CUDA_PARAMS_WS

// The arithmetic of the matmul ops on this workspace (kernels/precision.h): fp32 (the
// default: cuBLAS SGEMM in CUBLAS_PEDANTIC_MATH, bit for bit what it was), tf32 (the same
// SGEMMs in CUBLAS_TF32_TENSOR_OP_MATH: TF32 tensor cores, float32 accumulation; the
// materialising attention's GEMMs on this handle too), bf16 (both inputs of every matmul
// rounded to bfloat16 copies, cublasGemmEx with float32 output and CUBLAS_COMPUTE_32F;
// the outputs, bias and gradient accumulation stay float32).
void cuda_workspace_set_precision(AttentionCudaWorkspace* ws, Precision p);

// dst (n bfloat16, round to nearest even) = src (n float32), and back.
void f32_to_bf16_cuda(void* dst, const float* src, int64_t n, cudaStream_t stream);
void bf16_to_f32_cuda(float* dst, const void* src, int64_t n, cudaStream_t stream);

// dinp1 += dout, dinp2 += dout (residual_backward, ops.h).
void residual_backward_cuda(float* dinp1, float* dinp2, const float* dout, int64_t n, cudaStream_t stream);

// probs (N, V) = softmax(logits (N, V)); returns the mean loss; *n_correct (HOST pointer,
// may be null) = rows whose first argmax is the target. targets (N) device, in [0, V).
// Synchronises `stream` to return the loss.
double softmax_crossentropy_forward_cuda(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                         int64_t N, int64_t V, AttentionCudaWorkspace* ws, cudaStream_t stream);

// Returns mean (pred - target)^2 over n (synchronises `stream`).
double mse_forward_cuda(const float* pred, const float* target, int64_t n, AttentionCudaWorkspace* ws,
                        cudaStream_t stream);

// img (B, Cin, Hh, W) -> patches (B, (Hh/p)*(W/p), Cin*p*p), layout as patchify (ops.h).
void patchify_cuda(float* patches, const float* img, int64_t B, int64_t Cin, int64_t Hh, int64_t W, int64_t p,
                   cudaStream_t stream);

// AdamW and SGD exactly as ops.h (t is the 1-based step; momentum_buf may be null when
// momentum == 0).
void adamw_update_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int64_t t, cudaStream_t stream);
void sgd_update_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                     float weight_decay, cudaStream_t stream);

// ---- launch-free steps (CudaBackend's step graph, worker/model/backend_cuda.h) ----------------
// A training step captured as a CUDA graph cannot bring the loss or the gradient norm
// back to the host between its kernels: these ops keep them on the device, in a
// CudaStepScalars the host reads once the step has run, and the clipping and the update
// read their coefficients from it. The same arithmetic as the host path (the same
// kernels and sums; coef and the finiteness test in float64 on the device as on the host),
// so a graphed step gives the bits of the same step launched op by op.

// CudaScalarSum (kernels/scratch.h): a float64 sum and a count (a loss's sum and its
// correct rows; a sum of squares).

struct CudaStepScalars {
  CudaScalarSum loss;     // written by the loss op: the sum of the per-row losses / squares
  CudaScalarSum grad_sq;  // written by global_norm_to_device_cuda
  // set by the host before each replay (copied in by the backend)
  float lr;
  double c1, c2;  // AdamW's bias corrections (adamw_bias_corrections)
  double clip;    // 0: off
  // written by clip_decision_cuda
  double coef;  // clip / (norm + 1e-6), or 1
  int finite;   // the loss and the gradient norm are finite: else no update is made
};

// AdamW's bias corrections 1 - beta^t (t 1-based) as adamw_update_cuda computes them.
void adamw_bias_corrections(float beta1, float beta2, int64_t t, double* c1, double* c2);

// softmax_crossentropy_forward_cuda without the copy back: out->sum = the sum of the row
// losses, out->count = the correct rows (loss = sum / N on the host).
void softmax_crossentropy_sum_cuda(float* probs, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                                   CudaScalarSum* out, AttentionCudaWorkspace* ws, cudaStream_t stream);
// out->sum = sum (pred - target)^2 (target null: of pred^2), the partition of mse_forward_cuda
// and global_norm_cuda.
void sum_squares_cuda(const float* pred, const float* target, int64_t n, CudaScalarSum* out, AttentionCudaWorkspace* ws,
                      cudaStream_t stream);
// s->finite and s->coef from s->loss, s->grad_sq and s->clip (one thread).
void clip_decision_cuda(CudaStepScalars* s, cudaStream_t stream);
// g *= (float)s->coef when s->finite and s->coef < 1 (the host path's clip).
void scale_by_clip_cuda(float* g, int64_t n, const CudaStepScalars* s, cudaStream_t stream);
// adamw_update_cuda / sgd_update_cuda with lr, c1, c2 from s; nothing when !s->finite.
void adamw_update_graph_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float beta1, float beta2,
                             float eps, float weight_decay, const CudaStepScalars* s, cudaStream_t stream);
void sgd_update_graph_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float momentum,
                           float weight_decay, const CudaStepScalars* s, cudaStream_t stream);

}  // namespace attnsweep
