// The plain ops: the ops of kernels/ops.h and kernels/model_ops.h that both model
// backends (worker/model/backend.h CpuBackend, worker/model/backend_cuda.h CudaBackend)
// forward one to one. Each row of the X-macro ATTNSWEEP_PLAIN_OPS(X, X_WS) is the op's one
// declaration: its name, its parameter list, and the comment above it (shapes and
// semantics, the same on both devices unless it says otherwise). From the row come
// - the CPU function `void name(params)`: declared at the end of this file; defined in the
//   op's family file kernels/cpu/<family>.cpp;
// - the CUDA function (declared in kernels/ops_cuda.h; defined in kernels/cuda/<family>.cu,
//   the family file of the same name), with the CPU's parameters and device pointers:
//   - X(name, params):    void name_cuda(params..., cudaStream_t stream)
//   - X_WS(name, params): void name_cuda(params..., AttentionCudaWorkspace* ws, cudaStream_t stream):
//                         the op needs the backend's workspace (its cuBLAS handle or device scratch);
// - each backend's member `name(params)`, which calls the CPU function or name_cuda with
//   the backend's workspace and stream;
// - the op's requirement in the concept ModelBackend (worker/model/backend.h);
// - the cross-backend test TEST(CrossBackendOps, name) (tests/unit/test_ops_cuda.cpp):
//   it calls check_name(), which must exist (or it does not compile), and the count test
//   wants a row for it in that file's table of checks.
// How to add one: docs/adding-an-op.md.
// Conventions (llm.c's): contiguous float32 row-major buffers; backward functions ADD into
// their gradient outputs unless the comment says "overwrites"; deterministic for any thread
// count. Every CUDA op here is asynchronous on its stream.
// Not here, because a backend writes them out by hand: the composite ops
// (matmul_residual_forward, attention_block_*, layer_*_fused, readout_fused, ...), the
// ops whose CUDA version is more than a forward (the two losses' forwards, global_norm,
// adamw_update, sgd_update: host values, or a step graph's device scalars), the ops only
// one side calls (residual_backward, patchify, pad_key_mask, ...: declared in
// kernels/ops.h, kernels/model_ops.h and their _cuda.h twins), and the attention kernels.
// The concept ModelBackend states the signatures of those the model calls.
#pragma once

#include <cstdint>

#define ATTNSWEEP_PLAIN_OPS(X, X_WS)                                                                                 \
  /* ---- kernels/cpu/matmul.cpp, kernels/cuda/matmul.cu (cuBLAS on CUDA: FP32, results match the CPU to             \
     rounding, not bit for bit; dimensions above INT_MAX throw std::invalid_argument) ---- */                        \
  /* out (N, OC) = inp (N, C) @ weight^T + bias;  weight (OC, C), bias (OC) or null. */                              \
  X_WS(matmul_forward,                                                                                               \
       (float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C, int64_t OC))     \
  /* dinp (N, C) += dout @ weight; dweight (OC, C) += dout^T @ inp; dbias (OC) += colsum(dout).                      \
     dinp and dbias may be null (not wanted). */                                                                     \
  X_WS(matmul_backward, (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,             \
                         const float* weight, int64_t N, int64_t C, int64_t OC))                                     \
  /* ---- kernels/cpu/layernorm.cpp, kernels/cuda/layernorm.cu ---- */                                               \
  /* out (N, C) = (inp - mean) * rstd * weight + bias over the last axis; mean, rstd (N)                             \
     are saved for the backward. eps = 1e-5 (PyTorch's default). */                                                  \
  X(layernorm_forward, (float* out, float* mean, float* rstd, const float* inp, const float* weight,                 \
                        const float* bias, int64_t N, int64_t C))                                                    \
  /* dinp (N, C) +=, dweight (C) +=, dbias (C) += (column sums; CUDA: in the workspace's scratch). */                \
  X_WS(layernorm_backward, (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,          \
                            const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C))        \
  /* ---- kernels/cpu/elementwise.cpp, kernels/cuda/elementwise.cu ---- */                                           \
  /* GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); n elements;                          \
     the backward dinp += gelu'(inp) * dout. */                                                                      \
  X(gelu_forward, (float* out, const float* inp, int64_t n))                                                         \
  X(gelu_backward, (float* dinp, const float* inp, const float* dout, int64_t n))                                    \
  /* out (n) = inp1 + inp2. */                                                                                       \
  X(residual_forward, (float* out, const float* inp1, const float* inp2, int64_t n))                                 \
  /* ---- kernels/cpu/pooling.cpp, kernels/cuda/pooling.cu ---- */                                                   \
  /* out (B, C) = mean over T of inp (B, T, C); dinp (B, T, C) += dout / T. */                                       \
  X(meanpool_forward, (float* out, const float* inp, int64_t B, int64_t T, int64_t C))                               \
  X(meanpool_backward, (float* dinp, const float* dout, int64_t B, int64_t T, int64_t C))                            \
  /* ---- kernels/cpu/losses.cpp, kernels/cuda/losses.cu (the forwards: kernels/ops.h) ---- */                       \
  /* dlogits (N, V) += dloss * (probs - onehot(targets)) / N   (dloss: gradient of the mean loss);                   \
     targets (N) in [0, V). */                                                                                       \
  X(softmax_crossentropy_backward,                                                                                   \
    (float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N, int64_t V))                 \
  /* dpred (n) += dloss * 2 (pred - target) / n. */                                                                  \
  X(mse_backward, (float* dpred, const float* pred, const float* target, float dloss, int64_t n))                    \
  /* ---- kernels/cpu/embedding.cpp, kernels/cuda/embedding.cu ---- */                                               \
  /* Token embedding plus learned positions: out (B, T, C) = wte[ids[b, t]] + wpe[t];                                \
     wte (V, C), wpe (T, C) or null, ids (B, T) in [0, V). */                                                        \
  X(embedding_forward,                                                                                               \
    (float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T, int64_t C))           \
  /* dwte (V, C) += scatter of dout by ids, dwpe (T, C) += sum over b (either may be null).                          \
     CUDA: each dwte element is summed by one thread in token order (bit-identical to the CPU);                      \
     cost O(B T C) reads of ids per vocab partition, and a token id repeated k times costs                           \
     k serial adds: fine for the ids of a batch, slow for a batch of one repeated token. */                          \
  X(embedding_backward,                                                                                              \
    (float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T, int64_t C))              \
  /* ---- kernels/cpu/model_ops.cpp, kernels/cuda/model_ops.cu: the data movement of worker/model/model.h ---- */    \
  /* qkv (B, T, 3C) -> q, k, v (B, H, T, hd), C = H hd: the attention kernel's layout. Overwrites. */                \
  X(split_heads, (float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t hd))      \
  /* dq, dk, dv (B, H, T, hd) -> dqkv (B, T, 3C). Overwrites. */                                                     \
  X(merge_heads,                                                                                                     \
    (float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t H, int64_t hd))   \
  /* (B, H, T, hd) -> (B, T, C) and back. Overwrite. */                                                              \
  X(heads_to_rows, (float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd))                       \
  X(rows_to_heads, (float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd))                       \
  /* The block input: encoded (B, T, C), T = N + off (off = 1 with a CLS token, else 0):                             \
     encoded[b, t] = (t < off ? cls : emb[b, t - off]) + wpe[t]; emb (B, N, C), wpe (T, C),                          \
     cls (C) (unused when off = 0). Overwrites. */                                                                   \
  X(tokens_forward, (float* encoded, const float* emb, const float* cls, const float* wpe, int64_t B, int64_t T,     \
                     int64_t N, int64_t C, int64_t off))                                                             \
  /* From dencoded (B, T, C): dwpe (T, C) += sum over b (in batch order), dcls (C) += the                            \
     CLS rows (off = 1), and demb (B, N, C) = the token rows (overwritten). CUDA: each                               \
     output element summed by one thread in batch order (bit-identical to the CPU). */                               \
  X(tokens_backward, (float* dwpe, float* dcls, float* demb, const float* dencoded, int64_t B, int64_t T, int64_t N, \
                      int64_t C, int64_t off))                                                                       \
  /* CLS pooling: pooled (B, C) = inp[b, 0, :] of inp (B, T, C) (overwrites); backward                               \
     dinp[b, 0, :] += dpooled[b]. */                                                                                 \
  X(cls_pool_forward, (float* pooled, const float* inp, int64_t B, int64_t T, int64_t C))                            \
  X(cls_pool_backward, (float* dinp, const float* dpooled, int64_t B, int64_t T, int64_t C))                         \
  /* Masked mean pooling: out (B, C) = the mean of inp (B, T, C) over the t with                                     \
     mask[b, t] != 0 (0 when none are; overwrites), summed in float64 in t order (CUDA too:                          \
     the CPU's bits); backward dinp (B, T, C) += dout (B, C) / n_b on the unmasked rows. */                          \
  X(masked_meanpool_forward, (float* out, const float* inp, const float* mask, int64_t B, int64_t T, int64_t C))     \
  X(masked_meanpool_backward, (float* dinp, const float* dout, const float* mask, int64_t B, int64_t T, int64_t C))  \
  /* Paper B's read-out (worker/model/model.h): qkv (B, N, 3C) -> the query q (B, H, 1, hd) of the                   \
     last token and the keys / values k, v (B, H, N-1, hd) of the others. Overwrites. */                             \
  X(readout_split, (float* q, float* k, float* v, const float* qkv, int64_t B, int64_t N, int64_t H, int64_t hd))    \
  /* The backward: writes the query's dQ and the prompt's dK, dV into dqkv (B, N, 3C);                               \
     the other entries (the query's K, V, the prompt's Q) are left as they are (zero them). */                       \
  X(readout_merge,                                                                                                   \
    (float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t N, int64_t H, int64_t hd))   \
  /* pred (B) = the last coordinate of the query's output o (B, H, 1, hd) (head H-1,                                 \
     coordinate hd-1). Overwrites. Backward: do[b, H-1, 0, hd-1] = dpred[b] (overwrites                              \
     those entries only). */                                                                                         \
  X(readout_pick, (float* pred, const float* o, int64_t B, int64_t H, int64_t hd))                                   \
  X(readout_pick_backward, (float* dout, const float* dpred, int64_t B, int64_t H, int64_t hd))                      \
  /* g (n) *= c. */                                                                                                  \
  X(scale_inplace, (float* g, int64_t n, float c))

namespace attnsweep {

// The CPU declarations of the plain ops: void name(params).
#define ATTNSWEEP_DECLARE_CPU_OP(name, params) void name params;
ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_DECLARE_CPU_OP, ATTNSWEEP_DECLARE_CPU_OP)
#undef ATTNSWEEP_DECLARE_CPU_OP

// Each plain op's signature as a type, void(params) (ModelBackend's requirement of it,
// worker/model/backend.h). Declared here, outside any template, so that a parameter may be
// named like a template's parameter (B, T, C).
namespace plain_op_signature {
#define ATTNSWEEP_OP_SIGNATURE(name, params) using name = void params;
ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_OP_SIGNATURE, ATTNSWEEP_OP_SIGNATURE)
#undef ATTNSWEEP_OP_SIGNATURE
}  // namespace plain_op_signature

}  // namespace attnsweep
