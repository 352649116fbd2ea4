// Internals shared by the CUDA attention paths (materialising and fused): error checks,
// the workspace, the row/key masking rules, and the small deterministic helper kernels.
#pragma once

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "kernels/precision.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace attnsweep::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line);

#define ATTN_CUDA_CHECK(call)                                                                                \
  do {                                                                                                       \
    const cudaError_t attn_err_ = (call);                                                                    \
    if (attn_err_ != cudaSuccess) ::attnsweep::cuda::throw_cuda_error(attn_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define ATTN_CUBLAS_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    const cublasStatus_t attn_st_ = (call);                                                                            \
    if (attn_st_ != CUBLAS_STATUS_SUCCESS) ::attnsweep::cuda::throw_cublas_error(attn_st_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: configuration errors surface here, not at the next call.
#define ATTN_CUDA_CHECK_LAUNCH() ATTN_CUDA_CHECK(cudaGetLastError())

// Carves 256-byte aligned pieces out of one device allocation: first a sizing pass
// (base == nullptr), then the real one.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <class T>
  T* take(size_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t used_ = 0;
};

}  // namespace attnsweep::cuda

namespace attnsweep {
struct AttentionCudaWorkspace {
  cublasHandle_t cublas = nullptr;
  void* buffer = nullptr;
  size_t bytes = 0;
  // Device scratch of at least n bytes, valid until the next call on this workspace.
  char* reserve(size_t n);
  // The matmul ops' arithmetic (cuda_workspace_set_precision, ops_cuda.h) and, for bf16,
  // the bfloat16 copies of a GEMM's two inputs (grown on demand, kept).
  Precision precision = Precision::fp32;
  uint64_t epoch = 0;  // + 1 at every (re)allocation of buffer or gemm_in (step graphs hold their addresses)
  struct Bf16Buffer {
    __nv_bfloat16* p = nullptr;
    size_t count = 0;
  };
  Bf16Buffer gemm_in[2];
  __nv_bfloat16* bf16_copy(int slot, const float* src, size_t count, cudaStream_t stream);
};
}  // namespace attnsweep

namespace attnsweep::cuda {

// Which keys a query row attends (attention.h): key j of batch item b, for query i,
// when key_mask[b,j] != 0 and, if causal, j <= i + (Nk - Nq).
struct MaskInfo {
  const float* key_mask = nullptr;  // [B,Nk] or null
  const int32_t* prefix = nullptr;  // [B,Nk] inclusive count of attended keys, or null
  int64_t Nq = 1, Nk = 1;
  bool causal = false;

  // One past the last key position query i may see (<= 0: none).
  __device__ __forceinline__ int64_t key_end(int64_t i) const {
    if (!causal) return Nk;
    const int64_t e = i + (Nk - Nq) + 1;
    return e < Nk ? e : Nk;
  }
  // N of the scale and sigmoid bias: the number of keys row i attends.
  __device__ __forceinline__ int64_t n_attended(int64_t b, int64_t i) const {
    const int64_t e = key_end(i);
    if (e <= 0) return 0;
    return prefix ? static_cast<int64_t>(prefix[b * Nk + e - 1]) : e;
  }
  __device__ __forceinline__ bool key_allowed(int64_t b, int64_t j) const {
    return key_mask == nullptr || key_mask[b * Nk + j] != 0.0f;
  }
};

// prefix[b,j] = number of nonzero key_mask[b,0..j]. One block per batch item.
void launch_mask_prefix(const float* key_mask, int32_t* prefix, int64_t B, int64_t Nk, cudaStream_t stream);

// attn_fro[bh] = sqrt(sum_i row_attn[bh,i]), jac_fro likewise; fixed summation order.
void launch_norm_reduce(const double* row_attn, const double* row_jac, int64_t BH, int64_t Nq, double* attn_fro,
                        double* jac_fro, cudaStream_t stream);

// The scale of S = Q K^T * scale (attention.h: 0 means 1/sqrt(d)).
inline float score_scale(const AttentionSpec& spec, const AttentionShape& sh) {
  return spec.score_scale != 0.0f ? spec.score_scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.d)));
}

// The MaskInfo of a call; counts key_mask prefixes on the stream when there is a mask.
inline MaskInfo make_mask(const AttentionSpec& spec, const AttentionShape& sh, const float* key_mask, int32_t* prefix,
                          cudaStream_t stream) {
  MaskInfo m;
  m.key_mask = key_mask;
  m.Nq = sh.Nq;
  m.Nk = sh.Nk;
  m.causal = spec.causal;
  if (key_mask) {
    cuda::launch_mask_prefix(key_mask, prefix, sh.B, sh.Nk, stream);
    m.prefix = prefix;
  }
  return m;
}

void launch_bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);
void launch_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);

}  // namespace attnsweep::cuda
