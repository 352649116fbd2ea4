// The composite ops of a model backend: where the backends differ in how, not in what.
// Each row names the op sequence the op stands for, which is what a device backend runs
// (CudaBackend, worker/model/backend_cuda.cpp); the CPU runs its fused version, the same
// values (CpuBackend, worker/model/backend.h and backend.cpp). Each row of the X-macro
// ATTNSWEEP_COMPOSITE_OPS(X), X(return type, name, (params)), is the op's one signature:
// from it come each backend's member declaration and the op's requirement in the concept
// ModelBackend (worker/model/backend.h); each backend defines the members.
// Types named in the rows: HeadBuffers (worker/model/backend.h), AttentionSpec and
// AttentionShape (kernels/attention.h), LayerForwardArgs and LayerBackwardArgs
// (kernels/ops.h), ReadoutShape and ReadoutCell (kernels/readout_types.h); a file that
// expands the list has them.
// Not here, because their parameters or their kind differ by backend: readout_together
// (a vector of the backend's own type) and the static layer_buffers.
#pragma once

#define ATTNSWEEP_COMPOSITE_OPS(X)                                                                                    \
  /* out = inp @ weight^T + bias + resid (matmul_forward then residual_forward(out, out, resid));                     \
     the CPU finishes each block of rows while it is in cache. */                                                     \
  X(void, matmul_residual_forward,                                                                                    \
    (float* out, const float* inp, const float* weight, const float* bias, const float* resid, int64_t N, int64_t C,  \
     int64_t OC))                                                                                                     \
  /* pre = inp @ weight^T + bias, out = gelu(pre) (matmul_forward then gelu_forward). */                              \
  X(void, matmul_gelu_forward,                                                                                        \
    (float* pre, float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,          \
     int64_t OC))                                                                                                     \
  /* dinp OVERWRITTEN = dout @ weight, dweight, dbias added (zero(dinp) then matmul_backward), without the            \
     zero-fill pass on the CPU. */                                                                                    \
  X(void, matmul_backward_overwrite,                                                                                  \
    (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int64_t N,  \
     int64_t C, int64_t OC))                                                                                          \
  /* The backward of the matmul after a GELU (inp = gelu(pre)), through the GELU: dpre (N, C) OVERWRITTEN =           \
     gelu'(pre) * (dout @ weight); dweight, dbias added. The unfused sequence is zero(dgelu),                         \
     matmul_backward(dgelu, ...), zero(dpre), gelu_backward(dpre, pre, dgelu) with dgelu (N, C) scratch               \
     (LayerBuffers::gelu_grad); the CPU needs none (null). */                                                         \
  X(void, gelu_matmul_backward,                                                                                       \
    (float* dpre, float* dgelu, float* dweight, float* dbias, const float* dout, const float* inp, const float* pre,  \
     const float* weight, int64_t N, int64_t C, int64_t OC))                                                          \
  /* A transformer layer's attention on its fused projection qkv (B, T, 3C), shape (B, H, T, T, hd, hd), key_mask     \
     (B, T) or null: the output as rows atty (B, T, C), heads side by side; lse (B, H, T); attn_fro, jac_fro (B, H).  \
     The unfused sequence is split_heads(qkv -> heads.q, k, v), attention_forward(... -> heads.o),                    \
     heads_to_rows(heads.o -> atty); the CPU takes the packed path instead where it can                               \
     (kernels/attention.h attention_packed_cpu_usable, no key mask; heads unused, null). With a key mask, the norms   \
     count the rows of real queries only (kernels/real_query_norms.h). */                                             \
  X(void, attention_block_forward,                                                                                    \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask, const float* qkv,                 \
     const HeadBuffers& heads, float* atty, float* lse, double* attn_fro, double* jac_fro))                           \
  /* Its backward from datty (B, T, C): dqkv (B, T, 3C) OVERWRITTEN. The unfused sequence is                          \
     rows_to_heads(datty -> dheads.o), attention_backward(-> dheads.q, k, v), merge_heads. */                         \
  X(void, attention_block_backward,                                                                                   \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask, const float* qkv,                 \
     const HeadBuffers& heads, const float* atty, const float* lse, const float* datty, const HeadBuffers& dheads,    \
     float* dqkv))                                                                                                    \
  /* The whole layer at once (CPU: kernels/ops.h layer_forward_fused_cpu / layer_backward_fused_cpu, per block of     \
     samples, when it is usable there and nothing is masked; a device: never): returns whether it ran (the model runs \
     the op sequence otherwise). The CPU does not keep the GELU's output (a.fch_gelu ignored): its backward           \
     recomputes it. */                                                                                                \
  X(bool, layer_forward_fused,                                                                                        \
    (const AttentionSpec& spec, const AttentionShape& shape, int64_t F, const float* key_mask,                        \
     const LayerForwardArgs& a))                                                                                      \
  X(bool, layer_backward_fused,                                                                                       \
    (const AttentionSpec& spec, const AttentionShape& shape, int64_t F, const float* key_mask,                        \
     const LayerBackwardArgs& a))                                                                                     \
  /* The read-out head's forward (and, train, backward) in its own algebra (kernels/readout.h on the CPU,             \
     kernels/readout_cuda.h on CUDA; x [B, N, C], y [B]) instead of the op sequence of worker/model/model_impl.h's    \
     forward_readout / backward_readout, unless switched off (readout_algebra_enabled) or the device does not take    \
     the shape: returns whether it ran. */                                                                            \
  X(bool, readout_fused,                                                                                              \
    (const ReadoutShape& shape, const float* x, const float* y, ReadoutCell& cell, bool train, bool norms))

// A composite's member declaration: each backend declares its composites with
// ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_DECLARE_COMPOSITE) in its class.
#define ATTNSWEEP_DECLARE_COMPOSITE(ret, name, params) ret name params;
