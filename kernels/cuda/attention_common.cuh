// Internals shared by the CUDA attention paths (materialising and fused): the workspace, the row/key masking rules, and
// the small deterministic helper kernels.
#pragma once

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.cuh"
#include "kernels/precision.h"
#include "kernels/scratch.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attnsweep::cuda {

// Carves the workspace (kernels/scratch.h: one layout per call, sized and carved by it).
using ::attnsweep::Carver;

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
  // One past the last key query row i attends, 0 when it attends nothing (or i >= Nq);
  // n_out = its attended count (0 likewise). Element (i, j) is live iff j < row_end(i)
  // and key_allowed(b, j).
  __device__ __forceinline__ int64_t row_end(int64_t b, int64_t i, int64_t& n_out) const {
    n_out = 0;
    if (i >= Nq) return 0;
    n_out = n_attended(b, i);
    return n_out > 0 ? key_end(i) : 0;
  }
};

// ---- one block's share of a call (every fused and mma kernel maps blockIdx.x so) ----------

// Rows of a tile of at most `tile` rows that starts at `start` in a run of n.
__device__ __forceinline__ int tile_rows(int64_t n, int64_t start, int tile) {
  return static_cast<int>(n - start < tile ? n - start : tile);
}

// A block that owns BM query rows of one (batch, head) and streams the key tiles
// (forward, dQ): blockIdx.x = bh * ceil(Nq / BM) + query tile.
template <int BM>
struct QueryBlock {
  int64_t bh, b;  // (batch, head) index and batch item
  int64_t q0;     // first query row
  int rows;       // query rows that exist, <= BM
  int64_t kend;   // keys [0, kend) are all any row of the block may attend (causal: the last row's limit)

  __device__ __forceinline__ QueryBlock(const MaskInfo& mask, int64_t H) {
    const int64_t nqb = (mask.Nq + BM - 1) / BM;
    bh = blockIdx.x / nqb;
    b = bh / H;
    q0 = (blockIdx.x % nqb) * BM;
    rows = tile_rows(mask.Nq, q0, BM);
    kend = mask.Nk;
    if (mask.causal) {
      const int64_t e = mask.key_end(q0 + rows - 1);
      kend = e < 0 ? 0 : e;
    }
  }
};

// A block that owns BN keys of one (batch, head) and streams the query tiles of BM rows
// (dK, dV): blockIdx.x = bh * ceil(Nk / BN) + key tile.
template <int BN, int BM>
struct KeyBlock {
  int64_t bh, b;
  int64_t k0;      // first key
  int rows;        // keys that exist, <= BN
  int64_t qstart;  // first query tile's row: causal, the first tile with a row that sees key k0

  __device__ __forceinline__ KeyBlock(const MaskInfo& mask, int64_t H) {
    const int64_t nkb = (mask.Nk + BN - 1) / BN;
    bh = blockIdx.x / nkb;
    b = bh / H;
    k0 = (blockIdx.x % nkb) * BN;
    rows = tile_rows(mask.Nk, k0, BN);
    qstart = 0;
    if (mask.causal) {  // query i sees key k0 only when i + (Nk - Nq) >= k0
      const int64_t first = k0 - (mask.Nk - mask.Nq);
      qstart = first > 0 ? first / BM * BM : 0;
    }
  }
};

// Per key of a tile, by THREADS threads: 1 when it exists (j < krows) and key_mask lets
// it be attended, else 0.
template <int BN, int THREADS>
__device__ __forceinline__ void load_key_flags(float* flags, const MaskInfo& mask, int64_t b, int64_t k0, int krows) {
  for (int j = threadIdx.x; j < BN; j += THREADS) flags[j] = (j < krows && mask.key_allowed(b, k0 + j)) ? 1.0f : 0.0f;
}

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

// ---- what the fused and mma kernels read, and how they are launched -----------------------

// What every attention kernel reads first: the activation, the mask, the heads per batch
// item, the score scale and the inputs.
struct AttnArgs {
  ActivationSpec act;
  MaskInfo mask;
  int64_t H;
  float scale;
  const void* Q;
  const void* K;
  const void* V;
};

// A forward call's arguments (fused and mma kernels alike). The mma kernels take the
// norms flag as a template argument instead: it comes last, after what they read.
struct FwdArgs : AttnArgs {
  void* O;
  float* lse;        // natural-log row sums (softmax; may be null)
  double* row_attn;  // per query row ||phi(S)_i||^2 and ||J_i||^2, reduced by launch_norm_reduce
  double* row_jac;
  bool norms;
};

// A backward call's arguments; lse and Dsum (= dO_i . O_i, filled by launch_dsum) for
// softmax only, else null.
struct BwdArgs : AttnArgs {
  const void* dO;
  const float* lse;
  float* Dsum;
  void* dQ;
  void* dK;
  void* dV;
};

// The forward's arguments, its scratch (row norms, the key mask's prefix counts) carved
// from ws and the prefix counted on the stream. norms: the caller wants the norms.
FwdArgs forward_args(const AttentionSpec& spec, const AttentionShape& sh, const void* Q, const void* K, const void* V,
                     const float* key_mask, void* O, float* lse, bool norms, AttentionCudaWorkspace* ws,
                     cudaStream_t stream);
// The backward's, with Dsum's scratch (not yet filled: launch_dsum) and the prefix.
BwdArgs backward_args(const AttentionSpec& spec, const AttentionShape& sh, const void* Q, const void* K, const void* V,
                      const float* key_mask, const void* dO, const float* lse, void* dQ, void* dK, void* dV,
                      AttentionCudaWorkspace* ws, cudaStream_t stream);

// kernel<<<blocks, threads, smem bytes of dynamic shared memory>>>(args) on stream,
// after raising the kernel's shared-memory limit; `what` names the path in the error of
// a grid over 2^31 - 1 blocks. Nothing to do for blocks <= 0.
template <class Kernel, class Args>
void launch_blocks(const char* what, Kernel kernel, int64_t blocks, int threads, size_t smem, cudaStream_t stream,
                   const Args& args) {
  if (blocks <= 0) return;
  if (blocks > (int64_t{1} << 31) - 1) throw std::invalid_argument(std::string(what) + ": grid too large");
  ATTN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  ATTN_LAUNCH(static_cast<unsigned>(blocks), threads, smem, stream, kernel)(args);
  ATTN_CUDA_CHECK_LAUNCH();
}

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(__half x) {
  return __half2float(x);
}

// The softmax backward's Dsum_i = dO_i . O_i (= sum_j P_ij dP_ij), float32, one warp a row.
inline constexpr int kDsumThreads = 256;
template <int D, class T>
__global__ void __launch_bounds__(kDsumThreads)
    dsum_kernel(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ Dsum, int64_t rows) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kDsumThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int k = lane; k < D; k += 32) acc = fmaf(to_f32(O[row * D + k]), to_f32(dO[row * D + k]), acc);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) Dsum[row] = acc;
}
template <int D, class T>
void launch_dsum(const void* O, const void* dO, float* Dsum, int64_t rows, cudaStream_t stream) {
  if (rows <= 0) return;
  const int64_t blocks = (rows + kDsumThreads / 32 - 1) / (kDsumThreads / 32);
  ATTN_LAUNCH(static_cast<unsigned>(blocks), kDsumThreads, 0, stream, dsum_kernel<D, T>)
  (static_cast<const T*>(O), static_cast<const T*>(dO), Dsum, rows);
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);
void launch_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);

}  // namespace attnsweep::cuda
