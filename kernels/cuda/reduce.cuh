// What the CUDA op family files share (kernels/cuda/matmul.cu, layernorm.cu,
// elementwise.cu, pooling.cu, losses.cu, embedding.cu, optimizer.cu: one file per family
// of kernels/ops_cuda.h, each beside the CPU file of the same name in kernels/cpu/): the
// launch helpers and the deterministic reductions. Internal to kernels/cuda; each file
// gets its own copy (an unnamed namespace), as when they were one file.
// Each op is kernel -> launcher; the math follows the CPU family file line for line,
// including which sums run in float64, so the two backends differ only by rounding (FMA
// contraction, tanhf, cuBLAS's summation order).
// Determinism: no floating-point atomics anywhere. Cross-row reductions go through
// colsum (per-chunk float64 partials, chunks fixed by the shape, combined in chunk order)
// or sum_doubles (one block, fixed tree); per-row reductions are warp butterflies, whose
// result is the same on every lane and every run.
#pragma once

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/ops_cuda.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace attnsweep::cuda {
namespace {

// ---- launch helpers -------------------------------------------------------------------

constexpr int kThreads = kMapThreads;

// Butterfly sum over a warp: every lane ends with the same value (a + b == b + a), and
// the tree is fixed, so the result is deterministic.
__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Warp-per-row kernels: 8 rows per 256-thread block.
constexpr int kRowsPerBlock = kThreads / 32;
unsigned row_blocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > INT_MAX)
    throw std::invalid_argument(std::string("matmul_cuda: ") + what + " = " + std::to_string(v) +
                                " does not fit cuBLAS's int");
  return static_cast<int>(v);
}

// ---- deterministic column sums --------------------------------------------------------
// dst_o[c] += float(sum_i f(i, c)_o) for o < NOUT, i in [0, N), c in [0, C).
// Stage 1: block (32 columns x 8 row lanes) per (column slab, row chunk); each thread
// sums rows r0+ty, r0+ty+8, ... in float64; the 8 lanes are added in lane order; one
// float64 partial per (output, chunk, column). Stage 2: one thread per column adds the
// chunks in order. The chunking is a function of (N, C) only.

constexpr int kColsumLanes = 8;

template <int NOUT, class F>
__global__ void __launch_bounds__(32 * kColsumLanes)
    colsum_partial_kernel(F f, int64_t N, int64_t C, int64_t chunk_rows, int64_t chunks, double* __restrict__ partial) {
  __shared__ double sh[NOUT][kColsumLanes][32];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t c = blockIdx.x * 32ll + tx;
  const int64_t k = blockIdx.y;
  const int64_t r0 = k * chunk_rows;
  const int64_t r1 = r0 + chunk_rows < N ? r0 + chunk_rows : N;
  double acc[NOUT];
  for (int o = 0; o < NOUT; ++o) acc[o] = 0.0;
  if (c < C)
    for (int64_t i = r0 + ty; i < r1; i += kColsumLanes) {
      double v[NOUT];
      f(i, c, v);
      for (int o = 0; o < NOUT; ++o) acc[o] += v[o];
    }
  for (int o = 0; o < NOUT; ++o) sh[o][ty][tx] = acc[o];
  __syncthreads();
  if (ty == 0 && c < C)
    for (int o = 0; o < NOUT; ++o) {
      double s = 0.0;
      for (int y = 0; y < kColsumLanes; ++y) s += sh[o][y][tx];
      partial[(o * chunks + k) * C + c] = s;
    }
}

template <int NOUT>
struct Dsts {
  float* p[NOUT];
};

template <int NOUT>
__global__ void __launch_bounds__(kThreads)
    colsum_finish_kernel(const double* __restrict__ partial, int64_t chunks, int64_t C, Dsts<NOUT> dst) {
  for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x)
    for (int o = 0; o < NOUT; ++o) {
      if (dst.p[o] == nullptr) continue;
      double s = 0.0;
      for (int64_t k = 0; k < chunks; ++k) s += partial[(o * chunks + k) * C + c];
      dst.p[o][c] += static_cast<float>(s);
    }
}

template <int NOUT, class F>
void launch_colsum(const F& f, int64_t N, int64_t C, Dsts<NOUT> dst, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  // At most 256 chunks of >= 64 rows, and partials of at most 2^22 doubles (32 MiB): kernels/scratch.h.
  const ColsumChunks cs = colsum_chunks(N, C, NOUT);
  const int64_t chunks = cs.chunks, chunk_rows = cs.chunk_rows;
  auto* partial = reinterpret_cast<double*>(ws->reserve(static_cast<size_t>(cs.scratch_bytes(C, NOUT))));
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(chunks));
  ATTN_LAUNCH(grid, dim3(32, kColsumLanes), 0, stream, colsum_partial_kernel<NOUT, F>)
  (f, N, C, chunk_rows, chunks, partial);
  ATTN_CUDA_CHECK_LAUNCH();
  ATTN_LAUNCH(map_blocks(C), kThreads, 0, stream, colsum_finish_kernel<NOUT>)(partial, chunks, C, dst);
  ATTN_CUDA_CHECK_LAUNCH();
}

// ---- deterministic scalar sums (the losses) -------------------------------------------

using ScalarResult = CudaScalarSum;

// out->sum = sum of vals[0..n) and out->count = number of nonzero flags[0..n) (flags may
// be null): one block, threads stride the array, then a fixed shared-memory tree.
__global__ void __launch_bounds__(kThreads)
    sum_doubles_kernel(const double* __restrict__ vals, const int32_t* __restrict__ flags, int64_t n,
                       ScalarResult* __restrict__ out) {
  __shared__ double ss[kThreads];
  __shared__ long long sc[kThreads];
  const int tid = threadIdx.x;
  double s = 0.0;
  long long cnt = 0;
  for (int64_t i = tid; i < n; i += kThreads) {
    s += vals[i];
    if (flags) cnt += flags[i] != 0;
  }
  ss[tid] = s;
  sc[tid] = cnt;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off >>= 1) {
    if (tid < off) {
      ss[tid] += ss[tid + off];
      sc[tid] += sc[tid + off];
    }
    __syncthreads();
  }
  if (tid == 0) {
    out->sum = ss[0];
    out->count = sc[0];
  }
}

ScalarResult fetch_result(const ScalarResult* dev, cudaStream_t stream) {
  ScalarResult host{};
  ATTN_CUDA_CHECK(cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, stream));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace
}  // namespace attnsweep::cuda
