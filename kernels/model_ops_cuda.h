// CUDA backend of kernels/model_ops.h: the same functions, the same argument order,
// device pointers and a trailing stream. All are asynchronous except
// global_norm_cuda, which returns a host value (it synchronises the stream).
// Deterministic: no atomics; the sums over the batch (dwpe, dcls) give each output
// element to one thread, which adds the batch items in order (bit-identical to the CPU);
// the global norm is a fixed-partition float64 reduction (the partition depends on n
// only), so the same gradients give the same bits on every run (not the CPU's bits: the
// partition differs). Implementation: kernels/cuda/model_ops.cu.
#pragma once

#include "kernels/attention_cuda.h"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace attnsweep {

void split_heads_cuda(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t hd,
                      cudaStream_t stream);
void merge_heads_cuda(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t H,
                      int64_t hd, cudaStream_t stream);
void heads_to_rows_cuda(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t stream);
void rows_to_heads_cuda(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t stream);

void tokens_forward_cuda(float* encoded, const float* emb, const float* cls, const float* wpe, int64_t B, int64_t T,
                         int64_t N, int64_t C, int64_t off, cudaStream_t stream);
void tokens_backward_cuda(float* dwpe, float* dcls, float* demb, const float* dencoded, int64_t B, int64_t T, int64_t N,
                          int64_t C, int64_t off, cudaStream_t stream);

void cls_pool_forward_cuda(float* pooled, const float* inp, int64_t B, int64_t T, int64_t C, cudaStream_t stream);
void cls_pool_backward_cuda(float* dinp, const float* dpooled, int64_t B, int64_t T, int64_t C, cudaStream_t stream);

// Masked mean pool (model_ops.h; the CPU's summation order, so the CPU's bits).
void masked_meanpool_forward_cuda(float* out, const float* inp, const float* mask, int64_t B, int64_t T, int64_t C,
                                  cudaStream_t stream);
void masked_meanpool_backward_cuda(float* dinp, const float* dout, const float* mask, int64_t B, int64_t T, int64_t C,
                                   cudaStream_t stream);
// dst (H, n, hd) = rows rows[0..n) (device int32, each in [0, T)) of src (H, T, hd): one
// sample's query rows, for the norms of its real queries (worker/model/backend_cuda.cpp).
void gather_head_rows_cuda(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t H, int64_t T,
                           int64_t hd, cudaStream_t stream);

void readout_split_cuda(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t N, int64_t H, int64_t hd,
                        cudaStream_t stream);
void readout_merge_cuda(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t N, int64_t H,
                        int64_t hd, cudaStream_t stream);
void readout_pick_cuda(float* pred, const float* o, int64_t B, int64_t H, int64_t hd, cudaStream_t stream);
void readout_pick_backward_cuda(float* dout, const float* dpred, int64_t B, int64_t H, int64_t hd, cudaStream_t stream);

void scale_inplace_cuda(float* g, int64_t n, float c, cudaStream_t stream);
// sqrt(sum g^2): per-block float64 partials over a grid fixed by n, then one block adds
// them in a fixed tree; scratch from ws. Synchronises `stream`.
double global_norm_cuda(const float* g, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream);

}  // namespace attnsweep
