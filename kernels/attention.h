// Attention O = phi(Q K^T * score_scale) V for every activation of activation.h, forward
// and backward, with the per-(batch item, head) Frobenius norms of phi(S) and of its
// Jacobian. Layouts are contiguous row-major: Q [B,H,Nq,d], K [B,H,Nk,d],
// V [B,H,Nk,dv], O/dO [B,H,Nq,dv], key_mask [B,Nk] (1 = attend, 0 = padding).
// One entry point per backend; the same math (activation.h) in each.
#pragma once

#include "kernels/activation.h"

#include <cstdint>

namespace attnsweep {

struct AttentionShape {
  int64_t B = 1, H = 1, Nq = 1, Nk = 1, d = 1, dv = 1;
};

struct AttentionSpec {
  ActivationSpec act;
  bool causal = false;          // query i attends keys j <= i + (Nk - Nq)
  bool collect_norms = true;    // fill attn_fro / jac_fro
  float score_scale = 0.0f;     // 0: 1/sqrt(d)
};

// Forward. lse [B,H,Nq] is written for softmax (log-sum-exp of each score row, what the
// backward needs) and may be null otherwise. attn_fro / jac_fro [B,H] (float64) are
// written when collect_norms: ||phi(S)||_F and ||d phi(S)/dS||_F per batch item and head.
void attention_forward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q,
                           const float* K, const float* V, const float* key_mask, float* O, float* lse,
                           double* attn_fro, double* jac_fro);

// Backward from what the forward saved (softmax: lse and O; element-wise phi: nothing
// beyond Q, K, V). Writes dQ, dK, dV (overwritten, not accumulated).
void attention_backward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q,
                            const float* K, const float* V, const float* key_mask, const float* O,
                            const float* dO, const float* lse, float* dQ, float* dK, float* dV);

}  // namespace attnsweep
