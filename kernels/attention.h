// Attention O = phi(Q K^T * score_scale) V for every activation of activation.h, forward
// and backward, with the per-(batch item, head) Frobenius norms of phi(S) and of its
// Jacobian. Layouts are contiguous row-major: Q [B,H,Nq,d], K [B,H,Nk,d],
// V [B,H,Nk,dv], O/dO [B,H,Nq,dv], key_mask [B,Nk] (1 = attend, 0 = padding).
// One entry point per backend; the same math (activation.h) in each.
//
// Masks and what N means (every backend must follow this):
// - Query row i of a (b, h) attends key j iff key_mask[b, j] != 0 (or key_mask is null)
//   and, when causal, j <= i + (Nk - Nq). n_i = the number of keys row i attends.
// - The N of the scale c (inv_sqrt_n: 1/sqrt(n_i), inv_n: 1/n_i) and of the sigmoid
//   bias (-log n_i) is n_i, per row: a padded batch behaves exactly like the unpadded
//   one, and a causal row i sees the scale of its own prefix length.
// - Keys a row does not attend contribute nothing: softmax treats their scores as -inf,
//   element-wise phi gives them phi = 0 and phi' = 0 (in O, in the gradients and in both
//   norms). A row with n_i = 0 outputs 0, has lse = -inf, zero gradients and zero norms.
//
// Norms (float64 accumulation, deterministic: per-row sums are reduced in a fixed order
// that does not depend on the thread count):
//   attn_fro[b,h] = sqrt(sum_i sum_j phi(s_ij)^2)
//   jac_fro[b,h]  = sqrt(sum_i ||J_i||_F^2), J_i = d phi(s_i.) / d s_i.; softmax:
//                   sum p^2 - 2 sum p^3 + (sum p^2)^2, element-wise: sum_j phi'(s_ij)^2.
//
// CPU threading: OpenMP (omp_get_max_threads()) over (b, h, query block) in the forward
// and (b, h) in the backward; OpenBLAS (the products' path without AVX-512) is switched to
// one thread while such a region runs (OpenBLAS's thread count is process-global: do not
// call these from several host threads at once). Workspace: per-thread buffers kept from
// call to call, about 2 * rows * Nk floats, rows = 16..256 chosen from Nk, and with the
// AVX-512 products K and V packed (B H Nk (d + dv) floats in the forward, one head's per
// thread in the backward) (kernels/cpu/attention.cpp).
#pragma once

#include "kernels/activation.h"

#include <cmath>
#include <cstdint>

namespace attnsweep {

struct AttentionShape {
  int64_t B = 1, H = 1, Nq = 1, Nk = 1, d = 1, dv = 1;
};

struct AttentionSpec {
  ActivationSpec act;
  bool causal = false;        // query i attends keys j <= i + (Nk - Nq)
  bool collect_norms = true;  // fill attn_fro / jac_fro (false skips the work)
  float score_scale = 0.0f;   // 0: 1/sqrt(d)
};

// The score scale actually used: spec.score_scale, or 1/sqrt(d) when it is 0.
inline float attention_score_scale(const AttentionSpec& spec, const AttentionShape& shape) {
  return spec.score_scale != 0.0f ? spec.score_scale
                                  : static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.d)));
}

// Forward. lse [B,H,Nq] is written for softmax (log-sum-exp of each score row, what the
// backward needs; -inf for rows that attend nothing) and may be null otherwise (or when
// no backward follows). attn_fro / jac_fro [B,H] (float64) are written when
// collect_norms: ||phi(S)||_F and ||d phi(S)/dS||_F per batch item and head; they may be
// null when !collect_norms. key_mask may be null (every key attended).
void attention_forward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                           const float* V, const float* key_mask, float* O, float* lse, double* attn_fro,
                           double* jac_fro);

// Backward from what the forward saved (softmax: lse and O; element-wise phi: nothing
// beyond Q, K, V; O and lse may be null for element-wise phi). Writes dQ, dK, dV
// (overwritten, not accumulated).
void attention_backward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                            const float* V, const float* key_mask, const float* O, const float* dO, const float* lse,
                            float* dQ, float* dK, float* dV);

// Packed self-attention: the trainer's CPU fast path for small heads, on the layouts of
// its projections (worker/model/model.cpp) instead of [B,H,N,d]. Q, K, V are read in place from
// the fused projection output qkv (B, T, 3C), C = H d: q of (b, h, t) at
// qkv[(b T + t) 3C + h d], k at + C, v at + 2C; O and dO are (B, T, C), heads side by side
// (o of (b, h, t) at (b T + t) C + h d); the backward OVERWRITES dqkv (B, T, 3C), the same
// layout as qkv. lse [B,H,T] and the norms as above. Self-attention only (Nq = Nk = T),
// no key mask, not causal, d = dv = 16, T <= 256, AVX-512 (and the AVX-512 GEMM path not
// switched off: ATTNSWEEP_CPU_GEMM=openblas selects the split-heads path everywhere):
// attention_packed_cpu_usable says whether a call may take it. Deterministic and
// independent of the thread count (one thread per (b, h), sums in a fixed order).
bool attention_packed_cpu_usable(const AttentionSpec& spec, const AttentionShape& shape);
void attention_forward_packed_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv, float* O,
                                  float* lse, double* attn_fro, double* jac_fro);
void attention_backward_packed_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                   const float* O, const float* dO, const float* lse, float* dqkv);
// attention_forward_packed_cpu / attention_backward_packed_cpu for batch items [b0, b1)
// only (every head), on the calling thread (no OpenMP region): the same values; for
// callers that run their own blocks of samples (kernels/ops.h layer_forward_fused_cpu,
// layer_backward_fused_cpu). Pointers and shape are the whole batch's.
void attention_forward_packed_samples_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                          float* O, float* lse, double* attn_fro, double* jac_fro, int64_t b0,
                                          int64_t b1);
void attention_backward_packed_samples_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                           const float* O, const float* dO, const float* lse, float* dqkv, int64_t b0,
                                           int64_t b1);

}  // namespace attnsweep
