// The other ops a transformer needs, llm.c style: pairs xxx_forward / xxx_backward on
// contiguous float32 row-major buffers, shapes in the comment above each pair.
// Conventions (as llm.c):
// - backward functions ADD into their gradient outputs (dinp, dweight, ...): zero the
//   gradient buffers once per step; a tensor used twice (residual) then sums its grads.
// - every reduction runs in a fixed order (deterministic, independent of thread count);
//   sums over many terms accumulate in float64.
// The plain ops (those both model backends forward one to one: matmul_forward,
// matmul_backward, layernorm_*, gelu_*, residual_forward, meanpool_*, the losses'
// backwards, embedding_*) are declared by their rows in the op list, kernels/op_list.h,
// with their shapes; here the rest.
// CPU implementations in one file per family, kernels/cpu/<family>.cpp (matmul, layernorm,
// elementwise, pooling, losses, embedding, optimizer; kernels/cpu/ops_common.h), each
// beside its CUDA twin kernels/cuda/<family>.cu; the matmuls in kernels/cpu/gemm.cpp
// (AVX-512) or OpenBLAS sgemm; the fused layer in kernels/cpu/layer.cpp.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/op_list.h"

namespace attnsweep {

// matmul_backward (kernels/op_list.h) with dinp OVERWRITTEN (dinp = dout @ weight; dinp not null, its old contents
// not read): no zero-fill pass before it. The same values as zeroing dinp then
// matmul_backward (up to the sign of zeros). CPU only.
void matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int64_t N, int64_t C, int64_t OC);

// out (N, OC) = inp @ weight^T + bias + resid (N, OC): a projection back onto the residual
// stream; each block of rows gets its residual while it is in cache. The same values as
// matmul_forward then residual_forward(out, out, resid). CPU only. resid may not alias out.
void matmul_residual_forward(float* out, const float* inp, const float* weight, const float* bias, const float* resid,
                             int64_t N, int64_t C, int64_t OC);

// The MLP's GELU fused with its matmuls: each block of rows is finished (GELU applied)
// while it is in cache, instead of a second pass over the whole (N, OC) buffer.
// matmul_gelu_forward: pre (N, OC) = inp @ weight^T + bias, out (N, OC) = gelu(pre); the
// same values as matmul_forward then gelu_forward.
void matmul_gelu_forward(float* pre, float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                         int64_t C, int64_t OC);
// The backward of the matmul that follows a GELU (inp = gelu(pre), e.g. fcproj), through
// the GELU: dpre (N, C) = gelu'(pre) * (dout @ weight) is OVERWRITTEN (it is pre's only
// gradient: no zeroing, no intermediate buffer); dweight (OC, C) += dout^T @ inp and
// dbias (OC) += colsum(dout) as matmul_backward. The same values as matmul_backward into a
// zeroed buffer then gelu_backward into another zeroed one (up to the sign of zeros).
void gelu_matmul_backward(float* dpre, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* pre, const float* weight, int64_t N, int64_t C, int64_t OC);

// The backward of residual_forward (kernels/op_list.h): dinp1 += dout, dinp2 += dout.
void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n);

// Softmax cross-entropy: probs (N, V) = softmax(logits (N, V)); returns the mean over N
// of -log probs[i, targets[i]]; *n_correct (may be null) = rows whose argmax (first
// maximum) is the target. targets in [0, V).
double softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                    int64_t N, int64_t V);

// Mean squared error over n elements: returns mean (pred - target)^2.
double mse_forward(const float* pred, const float* target, int64_t n);

// Patch embedding = patchify + matmul_forward. patchify: img (B, Cin, Hh, W) -> patches
// (B, (Hh/p)*(W/p), Cin*p*p), patches in row-major order, each flattened as (Cin, p, p)
// (the layout of PyTorch's Conv2d(kernel = stride = p) weight). Hh and W divisible by p.
void patchify(float* patches, const float* img, int64_t B, int64_t Cin, int64_t Hh, int64_t W, int64_t p);

// The forward of one pre-LN transformer layer on the CPU, fused over blocks of a few
// samples: each block goes through LN -> QKV -> attention -> proj + residual -> LN ->
// fc + GELU -> fcproj + residual while its rows are in L2, instead of seven passes over
// the whole batch (each op reading what the previous one wrote out to memory). The same
// values, bit for bit, as that op sequence (layernorm_forward, matmul_forward,
// attention_forward_packed_cpu, matmul_residual_forward, layernorm_forward,
// matmul_gelu_forward, matmul_residual_forward), whatever the thread count: every op is
// row-local (attention: local to a sample). Buffers as in worker/model/model.h; shape is the
// attention's (B, H, T, T, 16, 16), C = 16 H, F the MLP width; attn_fro / jac_fro are
// written when spec.collect_norms. Usable (layer_forward_fused_cpu_usable) where
// attention_packed_cpu_usable is and the AVX-512 GEMMs take every matmul.
struct LayerForwardArgs {
  const float* inp;  // (B T, C) the residual stream in
  const float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  float *ln1, *ln1_mean, *ln1_rstd;  // (B T, C), (B T), (B T)
  float* qkv;                        // (B T, 3C)
  float *atty, *lse;                 // (B T, C), (B H T)
  float* res1;                       // (B T, C)
  float *ln2, *ln2_mean, *ln2_rstd;  // (B T, C), (B T), (B T)
  float *fch, *fch_gelu;             // (B T, F) before and after the GELU (fch_gelu may be null: not kept)
  float* res2;                       // (B T, C) the residual stream out
  double *attn_fro, *jac_fro;        // (B H) or null
};
// set_layer_fusion_cpu(false) makes _usable say no (tests compare both paths); on by
// default, off from the start with ATTNSWEEP_CPU_LAYER_FUSION=0 in the environment.
bool layer_forward_fused_cpu_usable(const AttentionSpec& spec, const AttentionShape& shape, int64_t F);
void set_layer_fusion_cpu(bool on);
void layer_forward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                             const LayerForwardArgs& a);

// Its backward, fused over the same blocks of samples: fcproj (through the GELU) -> fc ->
// LN2 -> proj -> attention -> QKV -> LN1, each block's rows staying in L2. dres (B T, C)
// holds d loss / d res2 on entry and d loss / d inp on return (the unfused path's
// s_.dres); the per-block intermediates (the unfused path's dln, dbig, dqkv) live in
// per-thread block scratch. The parameter
// gradients are ADDED (as the ops' backwards). Each block's share of a weight's gradient
// is one float32 FMA chain over its rows (LayerNorm: per group of 64 rows), and the shares
// are added in block order in float64: deterministic and independent of the thread count
// (the blocks depend on B and T only), but not bit for bit the unfused path, whose chains
// run over the whole batch (the difference is rounding: tested against it within the
// float32 bound). Usable where layer_forward_fused_cpu is.
struct LayerBackwardArgs {
  const float* inp;  // (B T, C) the layer's input
  // fch_gelu may be null: the GELU's output is then recomputed from fch (the same values).
  const float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *lse, *res1, *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu;
  const float *ln1_w, *qkv_w, *proj_w, *ln2_w, *fc_w, *fcproj_w;
  float* dres;
  float *g_ln1_w, *g_ln1_b, *g_qkv_w, *g_qkv_b, *g_proj_w, *g_proj_b, *g_ln2_w, *g_ln2_b, *g_fc_w, *g_fc_b, *g_fcproj_w,
      *g_fcproj_b;
};
void layer_backward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                              const LayerBackwardArgs& a);

// AdamW (Loshchilov & Hutter, PyTorch's torch.optim.AdamW): with t the 1-based step,
//   m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; mhat = m/(1-b1^t); vhat = v/(1-b2^t);
//   param -= lr (mhat / (sqrt(vhat) + eps) + weight_decay param)   (decoupled decay).
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t t);

// SGD as torch.optim.SGD (dampening 0, no Nesterov): g' = g + weight_decay param;
// with momentum > 0: buf = momentum buf + g' (buf starts at 0, so buf_1 = g'), step buf;
// param -= lr * step. momentum_buf may be null when momentum == 0.
void sgd_update(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay);

}  // namespace attnsweep
