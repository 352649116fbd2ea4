// CUDA backend of kernels/ops.h (declared in kernels/ops_cuda.h). Each op is
// kernel -> launcher; the math follows kernels/cpu/ops.cpp line for line, including
// which sums run in float64, so the two backends differ only by rounding (FMA
// contraction, tanhf, cuBLAS's summation order).
// Determinism: no floating-point atomics anywhere. Cross-row reductions go through
// colsum (per-chunk float64 partials, chunks fixed by the shape, combined in chunk order)
// or sum_doubles (one block, fixed tree); per-row reductions are warp butterflies, whose
// result is the same on every lane and every run.
// About 840 lines: the CUDA side of every op of kernels/ops.h, in the order of
// kernels/cpu/ops.cpp, one kernel and launcher each.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/model_ops_cuda.h"
#include "kernels/ops_cuda.h"

#include <algorithm>
#include <climits>
#include <cmath>
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
  // At most 256 chunks of >= 64 rows, and partials of at most 2^22 doubles (32 MiB).
  const int64_t max_chunks = std::clamp<int64_t>((int64_t{1} << 22) / (C * NOUT), 1, 256);
  int64_t chunks = std::min<int64_t>((N + 63) / 64, max_chunks);
  const int64_t chunk_rows = (N + chunks - 1) / chunks;
  chunks = (N + chunk_rows - 1) / chunk_rows;
  auto* partial = reinterpret_cast<double*>(ws->reserve(static_cast<size_t>(NOUT * chunks * C) * sizeof(double)));
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

// ---- matmul -------------------------------------------------------------------------------

struct AddBias {
  float* out;
  const float* bias;
  int64_t OC;
  __device__ void operator()(int64_t i) const { out[i] += bias[i % OC]; }
};

struct ColumnOf {  // f(i, c) = m[i, c] of a row-major (N, C) matrix
  const float* m;
  int64_t C;
  __device__ void operator()(int64_t i, int64_t c, double* v) const { v[0] = m[i * C + c]; }
};

// ---- layernorm ------------------------------------------------------------------------

constexpr double kLayernormEps = 1e-5;

__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             const float* __restrict__ inp, const float* __restrict__ weight,
                             const float* __restrict__ bias, int64_t N, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;  // whole warp
  const float* x = inp + i * C;
  double m = 0.0;
  for (int64_t c = lane; c < C; c += 32) m += x[c];
  m = warp_sum(m) / static_cast<double>(C);
  double var = 0.0;  // biased variance, as PyTorch's LayerNorm
  for (int64_t c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
  var = warp_sum(var) / static_cast<double>(C);
  const double r = 1.0 / sqrt(var + kLayernormEps);
  float* o = out + i * C;
  for (int64_t c = lane; c < C; c += 32) o[c] = static_cast<float>((x[c] - m) * r) * weight[c] + bias[c];
  if (lane == 0) {
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(r);
  }
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout * weight.
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_dinp_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                   const float* __restrict__ inp, const float* __restrict__ weight,
                                   const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N,
                                   int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;
  const float* x = inp + i * C;
  const float* dy = dout + i * C;
  const float mi = mean[i];
  const double ri = rstd[i];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double xhat = (x[c] - mi) * ri;
    const double dxhat = static_cast<double>(dy[c]) * weight[c];
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  s1 = warp_sum(s1) / static_cast<double>(C);
  s2 = warp_sum(s2) / static_cast<double>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const double xhat = (x[c] - mi) * ri;
    const double dxhat = static_cast<double>(dy[c]) * weight[c];
    dinp[i * C + c] += static_cast<float>(ri * (dxhat - s1 - xhat * s2));
  }
}

struct LayernormParamGrads {  // f(i, c) = (dout * xhat, dout)
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t i, int64_t c, double* v) const {
    const double xhat = (inp[i * C + c] - mean[i]) * static_cast<double>(rstd[i]);
    v[0] = dout[i * C + c] * xhat;
    v[1] = dout[i * C + c];
  }
};

// ---- GELU -----------------------------------------------------------------------------

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

struct GeluForward {
  float* out;
  const float* inp;
  __device__ void operator()(int64_t i) const {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
  }
};

struct GeluBackward {
  float* dinp;
  const float* inp;
  const float* dout;
  __device__ void operator()(int64_t i) const {
    const float x = inp[i];
    const float th = tanhf(kGeluK * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
  }
};

// ---- residual, mean-pool --------------------------------------------------------------

struct ResidualForward {
  float* out;
  const float* a;
  const float* b;
  __device__ void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

struct ResidualBackward {
  float* d1;
  float* d2;
  const float* dout;
  __device__ void operator()(int64_t i) const {
    d1[i] += dout[i];
    d2[i] += dout[i];
  }
};

struct MeanpoolForward {  // one thread per (b, c), tokens summed in order in float64
  float* out;
  const float* inp;
  int64_t T, C;
  __device__ void operator()(int64_t bc) const {
    const int64_t b = bc / C, c = bc % C;
    double s = 0.0;
    for (int64_t t = 0; t < T; ++t) s += inp[(b * T + t) * C + c];
    out[bc] = static_cast<float>(s / static_cast<double>(T));
  }
};

struct MeanpoolBackward {
  float* dinp;
  const float* dout;
  int64_t T, C;
  float inv;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, b = i / (T * C);
    dinp[i] += dout[b * C + c] * inv;
  }
};

// ---- softmax cross-entropy --------------------------------------------------------------

// Warp per row: first argmax, float64 normaliser, probs, the row's loss and hit.
__global__ void __launch_bounds__(kThreads)
    softmax_xent_forward_kernel(float* __restrict__ probs, double* __restrict__ row_loss, int32_t* __restrict__ row_ok,
                                const float* __restrict__ logits, const int32_t* __restrict__ targets, int64_t N,
                                int64_t V) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;
  const float* x = logits + i * V;
  // Lane-local first maximum, then the warp's: larger value wins, ties go to the lower
  // index, so every lane ends with the first maximum of the row (as the CPU's scan).
  float best = 0.0f;
  int64_t arg = -1;
  for (int64_t j = lane; j < V; j += 32)
    if (arg < 0 || x[j] > best) {
      best = x[j];
      arg = j;
    }
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, off);
    if (oa >= 0 && (arg < 0 || ob > best || (ob == best && oa < arg))) {
      best = ob;
      arg = oa;
    }
  }
  const double mx = best;
  double z = 0.0;
  for (int64_t j = lane; j < V; j += 32) z += exp(x[j] - mx);
  z = warp_sum(z);
  for (int64_t j = lane; j < V; j += 32) probs[i * V + j] = static_cast<float>(exp(x[j] - mx) / z);
  if (lane == 0) {
    const int32_t t = targets[i];
    row_loss[i] = -(x[t] - mx - log(z));  // -log softmax, stable
    row_ok[i] = arg == t;
  }
}

struct SoftmaxXentBackward {
  float* dlogits;
  const float* probs;
  const int32_t* targets;
  float s;
  int64_t V;
  __device__ void operator()(int64_t idx) const {
    const int64_t i = idx / V, j = idx % V;
    dlogits[idx] += s * (probs[idx] - (j == targets[i] ? 1.0f : 0.0f));
  }
};

// ---- MSE --------------------------------------------------------------------------------

// Stage 1 of the MSE and of the global norm: block b sums its grid-stride share of
// (pred - target)^2 (pred^2 when target is null) in float64 and writes partial[b]; the
// grid size is a function of n only.
__global__ void __launch_bounds__(kThreads)
    sum_squares_partial_kernel(const float* __restrict__ pred, const float* __restrict__ target, int64_t n,
                               double* __restrict__ partial) {
  __shared__ double ss[kThreads];
  const int tid = threadIdx.x;
  double s = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const double e = target != nullptr ? static_cast<double>(pred[i]) - target[i] : static_cast<double>(pred[i]);
    s += e * e;
  }
  ss[tid] = s;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off >>= 1) {
    if (tid < off) ss[tid] += ss[tid + off];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = ss[0];
}

struct MseBackward {
  float* dpred;
  const float* pred;
  const float* target;
  float s;
  __device__ void operator()(int64_t i) const { dpred[i] += s * (pred[i] - target[i]); }
};

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

// ---- optimizers -----------------------------------------------------------------------------

struct AdamW {
  float* params;
  const float* grads;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, weight_decay;
  double c1, c2;  // bias corrections 1 - beta^t, computed on the host as the CPU does
  __device__ void operator()(int64_t i) const {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const double mhat = mi / c1, vhat = vi / c2;
    const float p = params[i];
    params[i] =
        p - static_cast<float>(static_cast<double>(lr) * (mhat / (sqrt(vhat) + static_cast<double>(eps)) +
                                                          static_cast<double>(weight_decay) * static_cast<double>(p)));
  }
};

// AdamW and SGD of a graphed step: lr, c1, c2 from the step's scalars; no update when
// the step was not finite. The arithmetic of AdamW / Sgd above, line for line.
struct AdamWGraph {
  float* params;
  const float* grads;
  float* m;
  float* v;
  float beta1, beta2, eps, weight_decay;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (!s->finite) return;
    AdamW{params, grads, m, v, s->lr, beta1, beta2, eps, weight_decay, s->c1, s->c2}(i);
  }
};

struct ScaleByClip {
  float* g;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (s->finite && s->coef < 1.0) g[i] *= static_cast<float>(s->coef);
  }
};

__global__ void clip_decision_kernel(CudaStepScalars* s) {
  const double norm = sqrt(s->grad_sq.sum);
  s->finite = isfinite(s->loss.sum) && isfinite(norm);
  s->coef = s->clip > 0 ? s->clip / (norm + 1e-6) : 1.0;
}

struct Sgd {
  float* params;
  const float* grads;
  float* buf;
  float lr, momentum, weight_decay;
  __device__ void operator()(int64_t i) const {
    float g = grads[i] + weight_decay * params[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + g;
      g = buf[i];
    }
    params[i] -= lr * g;
  }
};

struct SgdGraph {
  float* params;
  const float* grads;
  float* buf;
  float momentum, weight_decay;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (!s->finite) return;
    Sgd{params, grads, buf, s->lr, momentum, weight_decay}(i);
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- matmul -------------------------------------------------------------------------------
// Row-major (N, C) is column-major (C, N): out^T (OC, N) = weight (OC, C) . inp^T (C, N),
// i.e. column-major C = op_T(weight as (C, OC)) . inp as (C, N).

void f32_to_bf16_cuda(void* dst, const float* src, int64_t n, cudaStream_t stream) {
  cuda::launch_f32_to_bf16(src, static_cast<__nv_bfloat16*>(dst), n, stream);
}

void bf16_to_f32_cuda(float* dst, const void* src, int64_t n, cudaStream_t stream) {
  cuda::launch_bf16_to_f32(static_cast<const __nv_bfloat16*>(src), dst, n, stream);
}

void cuda_workspace_set_precision(AttentionCudaWorkspace* ws, Precision p) {
  ATTN_CUBLAS_CHECK(
      cublasSetMathMode(ws->cublas, p == Precision::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH));
  ws->precision = p;
}

namespace {

// C (m, n) = alpha op(A) op(B) + beta C, column-major as cuBLAS: cublasSgemm, or with
// bf16 precision, op(A) and op(B) from bfloat16 copies (A holds lda * cols_a floats).
void gemm(AttentionCudaWorkspace* ws, cudaStream_t stream, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
          int k, float alpha, const float* A, int lda, int64_t a_count, const float* B, int ldb, int64_t b_count,
          float beta, float* C, int ldc) {
  ATTN_CUBLAS_CHECK(cublasSetStream(ws->cublas, stream));
  if (ws->precision != Precision::bf16) {
    ATTN_CUBLAS_CHECK(cublasSgemm(ws->cublas, ta, tb, m, n, k, &alpha, A, lda, B, ldb, &beta, C, ldc));
    return;
  }
  const __nv_bfloat16* a = ws->bf16_copy(0, A, static_cast<size_t>(a_count), stream);
  const __nv_bfloat16* b = ws->bf16_copy(1, B, static_cast<size_t>(b_count), stream);
  ATTN_CUBLAS_CHECK(cublasGemmEx(ws->cublas, ta, tb, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb, &beta,
                                 C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void matmul_forward_cuda(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                         int64_t OC, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  if (C == 0) {  // empty product: out = bias (or 0)
    ATTN_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(N * OC) * sizeof(float), stream));
  } else {
    const int iN = checked_int(N, "N"), iC = checked_int(C, "C"), iOC = checked_int(OC, "OC");
    gemm(ws, stream, CUBLAS_OP_T, CUBLAS_OP_N, iOC, iN, iC, 1.0f, weight, iC, OC * C, inp, iC, N * C, 0.0f, out, iOC);
  }
  if (bias != nullptr) launch_map(AddBias{out, bias, OC}, N * OC, stream);
}

void matmul_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t C, int64_t OC, AttentionCudaWorkspace* ws,
                          cudaStream_t stream) {
  if (N <= 0 || OC <= 0) return;
  if (C > 0) {
    const int iN = checked_int(N, "N"), iC = checked_int(C, "C"), iOC = checked_int(OC, "OC");
    // dinp^T (C, N) += weight^T (C, OC) . dout^T (OC, N)
    if (dinp != nullptr)
      gemm(ws, stream, CUBLAS_OP_N, CUBLAS_OP_N, iC, iN, iOC, 1.0f, weight, iC, OC * C, dout, iOC, N * OC, 1.0f, dinp,
           iC);
    // dweight^T (C, OC) += inp^T (C, N) . dout (N, OC)
    gemm(ws, stream, CUBLAS_OP_N, CUBLAS_OP_T, iC, iOC, iN, 1.0f, inp, iC, N * C, dout, iOC, N * OC, 1.0f, dweight, iC);
  }
  if (dbias != nullptr) launch_colsum<1>(ColumnOf{dout, OC}, N, OC, Dsts<1>{{dbias}}, ws, stream);
}

// ---- layernorm ------------------------------------------------------------------------------

void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, layernorm_forward_kernel)(out, mean, rstd, inp, weight, bias, N, C);
  ATTN_CUDA_CHECK_LAUNCH();
}

void layernorm_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                             AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, layernorm_backward_dinp_kernel)
  (dinp, dout, inp, weight, mean, rstd, N, C);
  ATTN_CUDA_CHECK_LAUNCH();
  launch_colsum<2>(LayernormParamGrads{dout, inp, mean, rstd, C}, N, C, Dsts<2>{{dweight, dbias}}, ws, stream);
}

// ---- element-wise ops -------------------------------------------------------------------------

void gelu_forward_cuda(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map(GeluForward{out, inp}, n, stream);
}
void gelu_backward_cuda(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t stream) {
  launch_map(GeluBackward{dinp, inp, dout}, n, stream);
}
void residual_forward_cuda(float* out, const float* inp1, const float* inp2, int64_t n, cudaStream_t stream) {
  launch_map(ResidualForward{out, inp1, inp2}, n, stream);
}
void residual_backward_cuda(float* dinp1, float* dinp2, const float* dout, int64_t n, cudaStream_t stream) {
  launch_map(ResidualBackward{dinp1, dinp2, dout}, n, stream);
}

void meanpool_forward_cuda(float* out, const float* inp, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  if (T <= 0) return;
  launch_map(MeanpoolForward{out, inp, T, C}, B * C, stream);
}
void meanpool_backward_cuda(float* dinp, const float* dout, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  if (T <= 0 || C <= 0) return;
  launch_map(MeanpoolBackward{dinp, dout, T, C, 1.0f / static_cast<float>(T)}, B * T * C, stream);
}

// ---- losses -------------------------------------------------------------------------------------

namespace {
// Scratch of the row losses and flags of N rows.
size_t xent_scratch_bytes(int64_t N) {
  Carver sizing(nullptr);
  sizing.take<double>(static_cast<size_t>(N));
  sizing.take<int32_t>(static_cast<size_t>(N));
  return sizing.used();
}
}  // namespace

double softmax_crossentropy_forward_cuda(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                         int64_t N, int64_t V, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || V <= 0) {
    if (n_correct != nullptr) *n_correct = 0;
    return 0.0;
  }
  Carver sizing(nullptr);
  sizing.take<ScalarResult>(1);
  const size_t result_bytes = sizing.used();
  // The result after the scratch of softmax_crossentropy_sum_cuda (which reserves less).
  ScalarResult* result =
      reinterpret_cast<ScalarResult*>(ws->reserve(result_bytes + xent_scratch_bytes(N)) + xent_scratch_bytes(N));
  softmax_crossentropy_sum_cuda(probs, logits, targets, N, V, result, ws, stream);
  const ScalarResult r = fetch_result(result, stream);  // synchronises the stream
  if (n_correct != nullptr) *n_correct = r.count;
  return r.sum / static_cast<double>(N);
}

void softmax_crossentropy_sum_cuda(float* probs, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                                   CudaScalarSum* out, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  Carver carve(ws->reserve(xent_scratch_bytes(N)));
  double* row_loss = carve.take<double>(static_cast<size_t>(N));
  int32_t* row_ok = carve.take<int32_t>(static_cast<size_t>(N));
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, softmax_xent_forward_kernel)
  (probs, row_loss, row_ok, logits, targets, N, V);
  ATTN_CUDA_CHECK_LAUNCH();
  ATTN_LAUNCH(1, kThreads, 0, stream, sum_doubles_kernel)(row_loss, row_ok, N, out);
  ATTN_CUDA_CHECK_LAUNCH();
}

void softmax_crossentropy_backward_cuda(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                                        int64_t N, int64_t V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  launch_map(SoftmaxXentBackward{dlogits, probs, targets, dloss / static_cast<float>(N), V}, N * V, stream);
}

namespace {

int64_t sum_squares_blocks(int64_t n) {
  return std::clamp<int64_t>((n + 8 * kThreads - 1) / (8 * kThreads), 1, 1024);  // from n only
}

// Partials of sum_squares_cuda, then out: the scratch holds `blocks` doubles first.
void sum_squares_into(const float* pred, const float* target, int64_t n, ScalarResult* out, char* scratch,
                      cudaStream_t stream) {
  const int64_t blocks = sum_squares_blocks(n);
  Carver carve(scratch);
  double* partial = carve.take<double>(static_cast<size_t>(blocks));
  ATTN_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, stream, sum_squares_partial_kernel)(pred, target, n, partial);
  ATTN_CUDA_CHECK_LAUNCH();
  ATTN_LAUNCH(1, kThreads, 0, stream, sum_doubles_kernel)(partial, nullptr, blocks, out);
  ATTN_CUDA_CHECK_LAUNCH();
}

// sum (pred - target)^2 (target may be null) over n > 0, in float64, partition fixed by n.
double sum_squares(const float* pred, const float* target, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  Carver sizing(nullptr);
  sizing.take<double>(static_cast<size_t>(sum_squares_blocks(n)));
  const size_t partial_bytes = sizing.used();
  sizing.take<ScalarResult>(1);
  char* base = ws->reserve(sizing.used());
  auto* result = reinterpret_cast<ScalarResult*>(base + partial_bytes);
  sum_squares_into(pred, target, n, result, base, stream);
  return fetch_result(result, stream).sum;  // synchronises the stream
}

}  // namespace

void sum_squares_cuda(const float* pred, const float* target, int64_t n, CudaScalarSum* out, AttentionCudaWorkspace* ws,
                      cudaStream_t stream) {
  if (n <= 0) {
    ATTN_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, stream));
    return;
  }
  Carver sizing(nullptr);
  sizing.take<double>(static_cast<size_t>(sum_squares_blocks(n)));
  sum_squares_into(pred, target, n, out, ws->reserve(sizing.used()), stream);
}

void clip_decision_cuda(CudaStepScalars* s, cudaStream_t stream) {
  ATTN_LAUNCH(1, 1, 0, stream, clip_decision_kernel)(s);
  ATTN_CUDA_CHECK_LAUNCH();
}

void scale_by_clip_cuda(float* g, int64_t n, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(ScaleByClip{g, s}, n, stream);
}

double mse_forward_cuda(const float* pred, const float* target, int64_t n, AttentionCudaWorkspace* ws,
                        cudaStream_t stream) {
  if (n <= 0) return 0.0;
  return sum_squares(pred, target, n, ws, stream) / static_cast<double>(n);
}

double global_norm_cuda(const float* g, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (n <= 0) return 0.0;
  return std::sqrt(sum_squares(g, nullptr, n, ws, stream));
}

void mse_backward_cuda(float* dpred, const float* pred, const float* target, float dloss, int64_t n,
                       cudaStream_t stream) {
  if (n <= 0) return;
  launch_map(MseBackward{dpred, pred, target, 2.0f * dloss / static_cast<float>(n)}, n, stream);
}

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

// ---- optimizers ---------------------------------------------------------------------------------------

void adamw_bias_corrections(float beta1, float beta2, int64_t t, double* c1, double* c2) {
  *c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  *c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
}

void adamw_update_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int64_t t, cudaStream_t stream) {
  double c1 = 0, c2 = 0;
  adamw_bias_corrections(beta1, beta2, t, &c1, &c2);
  launch_map(AdamW{params, grads, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2}, n, stream);
}

void adamw_update_graph_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float beta1, float beta2,
                             float eps, float weight_decay, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(AdamWGraph{params, grads, m, v, beta1, beta2, eps, weight_decay, s}, n, stream);
}

void sgd_update_graph_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float momentum,
                           float weight_decay, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(SgdGraph{params, grads, momentum_buf, momentum, weight_decay, s}, n, stream);
}

void sgd_update_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                     float weight_decay, cudaStream_t stream) {
  launch_map(Sgd{params, grads, momentum_buf, lr, momentum, weight_decay}, n, stream);
}

}  // namespace attnsweep
