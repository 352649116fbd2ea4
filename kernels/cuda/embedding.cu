// CUDA embeddings of kernels/ops_cuda.h: token plus position embedding and patchify.
// CPU side: kernels/cpu/embedding.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

namespace attnsweep::cuda {
namespace {

// ---- embeddings, patchify -----------------------------------------------------------------

struct EmbeddingForward {
  float* out;
  const int32_t* ids;
  const float* wte;
  const float* wpe;
  int64_t T, C;
  __device__ void operator()(int64_t i) const {
    const int64_t bt = i / C, c = i % C;
    const float e = wte[static_cast<int64_t>(ids[bt]) * C + c];
    out[i] = e + (wpe != nullptr ? wpe[(bt % T) * C + c] : 0.0f);
  }
};

// dwte scatter without atomics: the vocabulary is split into K classes (id mod K); block
// (x, k) owns columns [128x, 128x + 128) of every row whose id is in class k, so each
// dwte element has exactly one owner thread, which adds the tokens in token order.
// Every block scans all ids, tile by tile, through shared memory.
constexpr int kEmbThreads = 128;
constexpr int kEmbTile = 1024;

__global__ void __launch_bounds__(kEmbThreads)
    embedding_backward_wte_kernel(float* __restrict__ dwte, const float* __restrict__ dout,
                                  const int32_t* __restrict__ ids, int64_t BT, int64_t C, int K) {
  __shared__ int32_t tile[kEmbTile];
  const int64_t c = blockIdx.x * static_cast<int64_t>(kEmbThreads) + threadIdx.x;
  const int k = static_cast<int>(blockIdx.y);
  for (int64_t t0 = 0; t0 < BT; t0 += kEmbTile) {
    const int n = static_cast<int>(BT - t0 < kEmbTile ? BT - t0 : kEmbTile);
    __syncthreads();  // the previous tile is consumed
    for (int j = threadIdx.x; j < n; j += kEmbThreads) {
      const int32_t id = ids[t0 + j];
      tile[j] = id >= 0 && id % K == k ? id : -1;  // -1: another block's token
    }
    __syncthreads();
    if (c < C)
      for (int j = 0; j < n; ++j) {
        const int32_t id = tile[j];  // the same for the whole block: no divergence
        if (id >= 0) dwte[static_cast<int64_t>(id) * C + c] += dout[(t0 + j) * C + c];
      }
  }
}

struct EmbeddingBackwardWpe {  // one thread per (t, c), batch items in order
  float* dwpe;
  const float* dout;
  int64_t B, TC;
  __device__ void operator()(int64_t i) const {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += dout[b * TC + i];
    dwpe[i] = acc;
  }
};

struct Patchify {  // one thread per patches element
  float* patches;
  const float* img;
  int64_t Cin, Hh, W, p, pw, P, D;
  __device__ void operator()(int64_t idx) const {
    const int64_t d = idx % D, bp = idx / D;
    const int64_t b = bp / P, pi = bp % P;
    const int64_t py = pi / pw, px = pi % pw;
    const int64_t c = d / (p * p), y = (d / p) % p, x = d % p;
    patches[idx] = img[((b * Cin + c) * Hh + py * p + y) * W + px * p + x];
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- embeddings, patchify ---------------------------------------------------------------------------

void embedding_forward_cuda(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T,
                            int64_t C, cudaStream_t stream) {
  if (T <= 0 || C <= 0) return;
  launch_map(EmbeddingForward{out, ids, wte, wpe, T, C}, B * T * C, stream);
}

void embedding_backward_cuda(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T,
                             int64_t C, cudaStream_t stream) {
  const int64_t BT = B * T;
  if (BT <= 0 || C <= 0) return;
  if (dwte != nullptr) {
    // Enough vocabulary classes for ~2 blocks per SM of an H100/H200; any K gives the
    // same bits (each element's owner always adds in token order).
    const int64_t col_blocks = (C + kEmbThreads - 1) / kEmbThreads;
    const int K = static_cast<int>(std::clamp<int64_t>(264 / col_blocks, 1, 256));
    const dim3 grid(static_cast<unsigned>(col_blocks), static_cast<unsigned>(K));
    ATTN_LAUNCH(grid, kEmbThreads, 0, stream, embedding_backward_wte_kernel)(dwte, dout, ids, BT, C, K);
    ATTN_CUDA_CHECK_LAUNCH();
  }
  if (dwpe != nullptr) launch_map(EmbeddingBackwardWpe{dwpe, dout, B, T * C}, T * C, stream);
}

void patchify_cuda(float* patches, const float* img, int64_t B, int64_t Cin, int64_t Hh, int64_t W, int64_t p,
                   cudaStream_t stream) {
  if (p <= 0) return;
  const int64_t ph = Hh / p, pw = W / p, P = ph * pw, D = Cin * p * p;
  if (P <= 0 || D <= 0) return;
  launch_map(Patchify{patches, img, Cin, Hh, W, p, pw, P, D}, B * P * D, stream);
}

}  // namespace attnsweep
