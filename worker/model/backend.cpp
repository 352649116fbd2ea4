// CpuBackend (worker/model/backend.h): the composite ops (which of the three CPU paths a
// transformer layer takes, and the attention of the packed and split-heads ones) and the
// all-reduce of CPU data-parallel replicas.
#include "worker/model/backend.h"

#include "kernels/real_query_norms.h"

#include <vector>

namespace attnsweep {

namespace {

// The whole layer per block of samples (kernels/ops.h): the same answer in a step's
// forward and backward, and in layer_buffers.
bool layer_fused(const AttentionSpec& spec, const AttentionShape& shape, int64_t F, bool masked) {
  return !masked && layer_forward_fused_cpu_usable(spec, shape, F);
}

// The attention on Q, K, V read in place from qkv (kernels/attention.h), no head split.
bool attention_packed(const AttentionSpec& spec, const AttentionShape& shape, bool masked) {
  return !masked && attention_packed_cpu_usable(spec, shape);
}

}  // namespace

void CpuBackend::attention_forward(const AttentionSpec& spec, const AttentionShape& shape, const float* q,
                                   const float* k, const float* v, const float* key_mask, float* o, float* lse,
                                   double* attn_fro, double* jac_fro) {
  attention_forward_cpu(spec, shape, q, k, v, key_mask, o, lse, attn_fro, jac_fro);
}

void CpuBackend::attention_backward(const AttentionSpec& spec, const AttentionShape& shape, const float* q,
                                    const float* k, const float* v, const float* key_mask, const float* o,
                                    const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  attention_backward_cpu(spec, shape, q, k, v, key_mask, o, dout, lse, dq, dk, dv);
}

void CpuBackend::attention_block_forward(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                         const float* qkv, const HeadBuffers& heads, float* atty, float* lse,
                                         double* attn_fro, double* jac_fro) {
  if (attention_packed(spec, shape, key_mask != nullptr)) {
    attention_forward_packed_cpu(spec, shape, qkv, atty, lse, attn_fro, jac_fro);
    return;
  }
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  split_heads(heads.q, heads.k, heads.v, qkv, B, T, H, hd);
  attention_forward_cpu(spec, shape, heads.q, heads.k, heads.v, key_mask, heads.o, lse, attn_fro, jac_fro);
  if (spec.collect_norms && key_mask != nullptr)
    norms_of_real_queries_cpu(spec, shape, key_mask, heads.q, heads.k, heads.v, attn_fro, jac_fro);
  heads_to_rows(atty, heads.o, B, T, H, hd);
}

void CpuBackend::attention_block_backward(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                          const float* qkv, const HeadBuffers& heads, const float* atty,
                                          const float* lse, const float* datty, const HeadBuffers& dheads,
                                          float* dqkv) {
  if (attention_packed(spec, shape, key_mask != nullptr)) {
    // dO is datty as it is (rows); dQ, dK, dV land in dqkv directly.
    attention_backward_packed_cpu(spec, shape, qkv, atty, datty, lse, dqkv);
    return;
  }
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  rows_to_heads(dheads.o, datty, B, T, H, hd);
  attention_backward_cpu(spec, shape, heads.q, heads.k, heads.v, key_mask, heads.o, dheads.o, lse, dheads.q, dheads.k,
                         dheads.v);
  merge_heads(dqkv, dheads.q, dheads.k, dheads.v, B, T, H, hd);
}

bool CpuBackend::layer_forward_fused(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                                     const float* key_mask, const LayerForwardArgs& a) {
  if (!layer_fused(spec, shape, F, key_mask != nullptr)) return false;
  LayerForwardArgs args = a;
  args.fch_gelu = nullptr;  // not kept: recomputed in the backward
  layer_forward_fused_cpu(spec, shape, F, args);
  return true;
}

bool CpuBackend::layer_backward_fused(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                                      const float* key_mask, const LayerBackwardArgs& a) {
  if (!layer_fused(spec, shape, F, key_mask != nullptr)) return false;
  LayerBackwardArgs args = a;
  args.fch_gelu = nullptr;  // as the forward: recomputed from fch
  layer_backward_fused_cpu(spec, shape, F, args);
  return true;
}

LayerBuffers CpuBackend::layer_buffers(const AttentionSpec& spec, const AttentionShape& shape, int64_t F, bool masked) {
  LayerBuffers use;
  use.gelu_grad = false;  // gelu_matmul_backward is fused on every CPU path
  if (layer_fused(spec, shape, F, masked)) {
    use.split_heads = use.gelu_out = use.op_grads = false;
  } else if (attention_packed(spec, shape, masked)) {
    use.split_heads = false;
  }
  return use;
}

void CpuBackend::Collective::allreduce_mean(const std::vector<float*>& grads, int64_t n) {
  const int64_t k = static_cast<int64_t>(grads.size());
  float* out = grads[0];
  const double inv_k = 1.0 / static_cast<double>(k);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t r = 0; r < k; ++r) s += static_cast<double>(grads[static_cast<size_t>(r)][i]);
    out[i] = static_cast<float>(s * inv_k);
  }
}

}  // namespace attnsweep
