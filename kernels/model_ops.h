// The data movement of worker/model/model.h that is not a layer of ops.h: head split and
// merge around the attention kernel, token assembly (CLS, positions), the CLS pooling,
// paper B's read-out gathers, and the optimizer's helpers (gradient scale, global norm).
// Same conventions as ops.h: contiguous float32 row-major buffers, shapes in the comment
// above each function, gradients ADDED into unless the comment says "overwrites";
// deterministic for any thread count. CPU implementations in kernels/cpu/model_ops.cpp;
// the CUDA ones (device pointers + stream) in kernels/model_ops_cuda.h.
#pragma once

#include <cstdint>

namespace attnsweep {

// qkv (B, T, 3C) -> q, k, v (B, H, T, hd), C = H hd: the attention kernel's layout. Overwrites.
void split_heads(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t hd);
// dq, dk, dv (B, H, T, hd) -> dqkv (B, T, 3C). Overwrites.
void merge_heads(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t H,
                 int64_t hd);
// (B, H, T, hd) -> (B, T, C) and back. Overwrite.
void heads_to_rows(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd);
void rows_to_heads(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd);

// The block input: encoded (B, T, C), T = N + off (off = 1 with a CLS token, else 0):
// encoded[b, t] = (t < off ? cls : emb[b, t - off]) + wpe[t]; emb (B, N, C), wpe (T, C),
// cls (C) (unused when off = 0). Overwrites.
void tokens_forward(float* encoded, const float* emb, const float* cls, const float* wpe, int64_t B, int64_t T,
                    int64_t N, int64_t C, int64_t off);
// From dencoded (B, T, C): dwpe (T, C) += sum over b (in batch order), dcls (C) += the
// CLS rows (off = 1), and demb (B, N, C) = the token rows (overwritten).
void tokens_backward(float* dwpe, float* dcls, float* demb, const float* dencoded, int64_t B, int64_t T, int64_t N,
                     int64_t C, int64_t off);

// CLS pooling: pooled (B, C) = inp[b, 0, :] of inp (B, T, C) (overwrites); backward
// dinp[b, 0, :] += dpooled[b].
void cls_pool_forward(float* pooled, const float* inp, int64_t B, int64_t T, int64_t C);
void cls_pool_backward(float* dinp, const float* dpooled, int64_t B, int64_t T, int64_t C);

// Padding (worker/model/model.h): mask (B, T) = 1 for the CLS row (t < off) and the tokens
// whose id (ids (B, N), T = N + off) is not pad_id, else 0. Overwrites. Host buffers on
// every backend (the model builds the mask on the host and stages it to its device).
void pad_key_mask(float* mask, const int32_t* ids, int32_t pad_id, int64_t B, int64_t T, int64_t N, int64_t off);
// Masked mean pooling: out (B, C) = the mean of inp (B, T, C) over the t with
// mask[b, t] != 0 (0 when none are; overwrites), summed in float64 in t order; backward
// dinp (B, T, C) += dout (B, C) / n_b on the unmasked rows.
void masked_meanpool_forward(float* out, const float* inp, const float* mask, int64_t B, int64_t T, int64_t C);
void masked_meanpool_backward(float* dinp, const float* dout, const float* mask, int64_t B, int64_t T, int64_t C);

// Paper B's read-out (worker/model/model.h): qkv (B, N, 3C) -> the query q (B, H, 1, hd) of the
// last token and the keys / values k, v (B, H, N-1, hd) of the others. Overwrites.
void readout_split(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t N, int64_t H, int64_t hd);
// The backward: writes the query's dQ and the prompt's dK, dV into dqkv (B, N, 3C);
// the other entries (the query's K, V, the prompt's Q) are left as they are (zero them).
void readout_merge(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t N, int64_t H,
                   int64_t hd);
// pred (B) = the last coordinate of the query's output o (B, H, 1, hd) (head H-1,
// coordinate hd-1). Overwrites. Backward: do[b, H-1, 0, hd-1] = dpred[b] (overwrites
// those entries only).
void readout_pick(float* pred, const float* o, int64_t B, int64_t H, int64_t hd);
void readout_pick_backward(float* dout, const float* dpred, int64_t B, int64_t H, int64_t hd);

// g (n) *= c.
void scale_inplace(float* g, int64_t n, float c);
// sqrt(sum g^2) in float64: per-block float64 sums over fixed blocks of 2^14 elements,
// added in block order (the same value for any thread count).
double global_norm(const float* g, int64_t n);

}  // namespace attnsweep
