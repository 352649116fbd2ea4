// The read-out in its own algebra on CUDA (kernels/readout_cuda.h; the formulas are in
// kernels/readout.h). Launch 1, one block per (prompt b, cell k): the query's q and u of
// each head, the scores s_n = x_n . u and phi over the L keys in shared memory, the norms,
// m = sum_n p_n x_n and the prediction; training, dm, ds and du, and the prompt's terms of
// the three gradient pieces that are not zero (head H-1's rows of Q and K, V's row C - 1)
// into a [K, B, R] buffer. Launch 2, one thread per gradient element (and one per loss)
// and cell: the sum over the prompts in prompt order, float64. Every block-wide sum has a
// fixed shape (warp shuffles, then the warps in order), so the bits do not depend on the
// schedule or on the other cells of the call.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/readout_cuda.h"

#include <cmath>
#include <stdexcept>
#include <string>

namespace attnsweep {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxC = 65;  // d <= 64 (experiments/icl_regression.cpp), as on the CPU

struct DevCell {
  const float* w;  // qkv_w (3C, C)
  float* pred;     // [B] or null
  double* attn_fro;
  double* jac_fro;
  PhiParams pp;  // resolved for the L keys
};

struct PromptArgs {
  const float* x;  // [B, N, C]
  const float* y;  // [B]
  int32_t B, N, C, H;
  bool norms, train;
  float* gpart;   // [K, B, R], R = (2 hd + 1) C: dQ_{H-1}, dK_{H-1}, dV[C-1] terms
  double* lpart;  // [K, B]: (pred - y)^2
  DevCell cell[kReadoutCudaMaxCells];
};

struct ReduceArgs {
  int64_t first;  // the element of thread 0 of block 0
  int32_t B, C, H;
  bool train;
  const float* gpart;
  const double* lpart;
  CudaScalarSum* loss;  // [K]
  float* grad[kReadoutCudaMaxCells];
};

// The rows of the gradient one prompt reaches, at their offset in its R terms (-1: none).
__host__ __device__ inline int64_t part_offset(int64_t row, int64_t C, int64_t hd) {
  if (row >= C - hd && row < C) return (row - (C - hd)) * C;                   // head H-1's rows of Q
  if (row >= 2 * C - hd && row < 2 * C) return (hd + row - (2 * C - hd)) * C;  // of K
  if (row == 3 * C - 1) return 2 * hd * C;                                     // V's last row
  return -1;
}

template <class T>
__device__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's sum (or max) of one value a thread: the warps' results in warp order.
// sh holds kWarps + 1 values; every thread gets the result.
template <bool Max, class T>
__device__ T block_reduce(T v, T* sh) {
  if constexpr (Max)
    v = warp_max(v);
  else
    v = warp_sum(v);
  __syncthreads();  // the last call's result has been read
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T t = sh[0];
    for (int w = 1; w < kWarps; ++w) {
      if constexpr (Max)
        t = fmaxf(t, sh[w]);
      else
        t += sh[w];
    }
    sh[kWarps] = t;
  }
  __syncthreads();
  return sh[kWarps];
}

// out[j] = sum_n w[n] x[n][j] for j < C, n < L (x row-major with C columns): per column a
// sum over each thread's keys, the warp's, then the warps' in order. Ends synchronised.
__device__ void keys_combine(const float* w, const float* x, int L, int C, float* out, float* red) {
  const int tid = threadIdx.x;
  for (int j = 0; j < C; ++j) {
    float acc = 0.0f;
    for (int n = tid; n < L; n += kThreads) acc += w[n] * x[static_cast<int64_t>(n) * C + j];
    acc = warp_sum(acc);
    if ((tid & 31) == 0) red[(tid / 32) * kMaxC + j] = acc;
  }
  __syncthreads();
  if (tid < C) {
    float t = red[tid];
    for (int w = 1; w < kWarps; ++w) t += red[w * kMaxC + tid];
    out[tid] = t;
  }
  __syncthreads();
}

struct Shared {
  float z[kMaxC], q[kMaxC], u[kMaxC], m[kMaxC], dm[kMaxC], du[kMaxC], dq[kMaxC];
  float red[kWarps * kMaxC];
  float fred[kWarps + 1];
  double dred[kWarps + 1];
  float pred;
};

// Head h's q = Q_h z and u = K_h^T q scale (kernels/readout.h), into sh.
__device__ void head_query(const float* w, int h, int C, int hd, float scale, Shared& sh) {
  const int tid = threadIdx.x;
  const float* Qh = w + static_cast<int64_t>(h) * hd * C;
  const float* Kh = w + static_cast<int64_t>(C + h * hd) * C;
  if (tid < hd) {
    float acc = 0.0f;
    for (int j = 0; j < C; ++j) acc += Qh[tid * C + j] * sh.z[j];
    sh.q[tid] = acc;
  }
  __syncthreads();
  if (tid < C) {
    float acc = 0.0f;
    for (int i = 0; i < hd; ++i) acc += Kh[i * C + tid] * (sh.q[i] * scale);
    sh.u[tid] = acc;
  }
  __syncthreads();
}

// The scores of the L keys into s, phi of them into p (softmax: normalised), and the row's
// norm sums when norms. Ends synchronised.
__device__ RowNormSq scores_forward(const PhiParams& pp, const float* x, int L, int C, bool norms, float* s, float* p,
                                    Shared& sh) {
  const int tid = threadIdx.x;
  float mx = -INFINITY;
  for (int n = tid; n < L; n += kThreads) {
    float acc = 0.0f;
    for (int j = 0; j < C; ++j) acc += x[static_cast<int64_t>(n) * C + j] * sh.u[j];
    s[n] = acc;
    mx = fmaxf(mx, acc);
  }
  RowNormSq nrm;
  if (pp.activation == Activation::softmax) {
    mx = block_reduce<true>(mx, sh.fred);
    double z = 0.0, a2 = 0.0, a3 = 0.0;
    for (int n = tid; n < L; n += kThreads) {
      const float e = expf(s[n] - mx);
      p[n] = e;
      z += e;
      if (norms) {
        a2 += static_cast<double>(e) * e;
        a3 += static_cast<double>(e) * e * e;
      }
    }
    z = block_reduce<false>(z, sh.dred);
    if (norms) {
      a2 = block_reduce<false>(a2, sh.dred);
      a3 = block_reduce<false>(a3, sh.dred);
      nrm = softmax_row_norms_from_sums(z, a2, a3);
    }
    const float inv = static_cast<float>(1.0 / z);
    for (int n = tid; n < L; n += kThreads) p[n] *= inv;
  } else {
    double sa = 0.0, sj = 0.0;
    for (int n = tid; n < L; n += kThreads) {
      const float v = phi_elementwise<float>(pp, s[n]);
      p[n] = v;
      if (norms) {  // (the forward alone needs no phi')
        const double g = dphi_elementwise<float>(pp, s[n]);
        sa += static_cast<double>(v) * v;
        sj += g * g;
      }
    }
    if (norms) {
      nrm.attn = block_reduce<false>(sa, sh.dred);
      nrm.jac = block_reduce<false>(sj, sh.dred);
    }
  }
  __syncthreads();
  return nrm;
}

// The backward of the scores: ds into s (whose scores it no longer needs) from dm, then
// du = sum_n ds_n x_n into sh.du. Ends synchronised.
__device__ void scores_backward(const PhiParams& pp, const float* x, int L, int C, float* s, const float* p,
                                Shared& sh) {
  const int tid = threadIdx.x;
  if (pp.activation == Activation::softmax) {
    double D = 0.0;  // sum_n p_n dp_n
    for (int n = tid; n < L; n += kThreads) {
      float dp = 0.0f;
      for (int j = 0; j < C; ++j) dp += x[static_cast<int64_t>(n) * C + j] * sh.dm[j];
      s[n] = dp;
      D += static_cast<double>(p[n]) * dp;
    }
    const float Df = static_cast<float>(block_reduce<false>(D, sh.dred));
    for (int n = tid; n < L; n += kThreads) s[n] = p[n] * (s[n] - Df);
  } else {
    for (int n = tid; n < L; n += kThreads) {
      float dp = 0.0f;
      for (int j = 0; j < C; ++j) dp += x[static_cast<int64_t>(n) * C + j] * sh.dm[j];
      s[n] = dphi_elementwise<float>(pp, s[n]) * dp;
    }
  }
  __syncthreads();
  keys_combine(s, x, L, C, sh.du, sh.red);
}

// (__grid_constant__: the cell is picked by blockIdx.y from the launch's argument space,
// without a copy of the arguments into each thread's local memory.)
__global__ void __launch_bounds__(kThreads) readout_prompt_kernel(const __grid_constant__ PromptArgs a) {
  ATTN_DYNAMIC_SHARED(float, keys);  // s [L], then p [L]
  __shared__ Shared sh;
  const int b = blockIdx.x, k = blockIdx.y, tid = threadIdx.x;
  const DevCell& cell = a.cell[k];
  const int C = a.C, H = a.H, hd = C / H, L = a.N - 1;
  const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(hd)));
  const float* x = a.x + static_cast<int64_t>(b) * a.N * C;
  float* s = keys;
  float* p = keys + L;
  if (tid < C) sh.z[tid] = x[static_cast<int64_t>(L) * C + tid];
  __syncthreads();
  for (int h = a.norms ? 0 : H - 1; h < H; ++h) {  // the last head reaches the loss
    head_query(cell.w, h, C, hd, scale, sh);
    const RowNormSq nrm = scores_forward(cell.pp, x, L, C, a.norms, s, p, sh);
    if (a.norms && tid == 0) {
      cell.attn_fro[b * H + h] = sqrt(nrm.attn);
      cell.jac_fro[b * H + h] = sqrt(nrm.jac);
    }
  }
  keys_combine(p, x, L, C, sh.m, sh.red);
  const float* v_last = cell.w + static_cast<int64_t>(3 * C - 1) * C;
  if (tid == 0) {
    float pred = 0.0f;
    for (int j = 0; j < C; ++j) pred += v_last[j] * sh.m[j];
    sh.pred = pred;
    if (cell.pred) cell.pred[b] = pred;
    const double err = static_cast<double>(pred) - a.y[b];
    a.lpart[static_cast<int64_t>(k) * a.B + b] = err * err;
  }
  __syncthreads();
  if (!a.train) return;

  // mse_backward's dpred (kernels/ops.h): 2 / B (pred - y) in float32.
  const float dpred = (2.0f / static_cast<float>(a.B)) * (sh.pred - a.y[b]);
  float* g = a.gpart + (static_cast<int64_t>(k) * a.B + b) * (2 * hd + 1) * C;
  if (tid < C) {
    g[2 * hd * C + tid] = dpred * sh.m[tid];
    sh.dm[tid] = dpred * v_last[tid];
  }
  __syncthreads();
  scores_backward(cell.pp, x, L, C, s, p, sh);
  // dK_h = (q scale) du^T, dQ_h = (K_h du scale) z^T, h = H - 1.
  const float* Kh = cell.w + static_cast<int64_t>(C + (H - 1) * hd) * C;
  if (tid < hd) {
    float dq = 0.0f;
    for (int j = 0; j < C; ++j) dq += Kh[tid * C + j] * sh.du[j];
    sh.dq[tid] = dq * scale;
  }
  __syncthreads();
  for (int e = tid; e < hd * C; e += kThreads) {
    const int i = e / C, j = e % C;
    g[hd * C + e] = (sh.q[i] * scale) * sh.du[j];
    g[e] = sh.dq[i] * sh.z[j];
  }
}

// Element e of cell blockIdx.y's gradient (e < 3 C C) or, e == 3 C C, its loss: the sum
// over the prompts in order, float64.
__global__ void __launch_bounds__(kThreads) readout_reduce_kernel(const __grid_constant__ ReduceArgs a) {
  const int k = blockIdx.y;
  const int64_t C = a.C, hd = C / a.H, G = 3 * C * C, R = (2 * hd + 1) * C;
  const int64_t e = a.first + static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e == G) {
    double t = 0.0;
    for (int b = 0; b < a.B; ++b) t += a.lpart[static_cast<int64_t>(k) * a.B + b];
    a.loss[k].sum = t;
    a.loss[k].count = 0;
    return;
  }
  if (!a.train || e > G) return;
  const int64_t off = part_offset(e / C, C, hd);
  double t = 0.0;
  if (off >= 0)
    for (int b = 0; b < a.B; ++b) t += a.gpart[(static_cast<int64_t>(k) * a.B + b) * R + off + e % C];
  a.grad[k][e] = static_cast<float>(t);
}

int max_dynamic_shared_bytes() {
  int dev = 0, optin = 0;
  ATTN_CUDA_CHECK(cudaGetDevice(&dev));
  ATTN_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return optin - static_cast<int>(sizeof(Shared));
}

}  // namespace
}  // namespace cuda

bool readout_cuda_supported(const ReadoutShape& sh, int64_t K) {
  if (sh.C < 1 || sh.C > cuda::kMaxC || sh.H < 1 || sh.C % sh.H != 0 || sh.N < 2 || sh.B < 0) return false;
  if (K < 1 || K > kReadoutCudaMaxCells) return false;
  return static_cast<int64_t>(2 * sizeof(float)) * (sh.N - 1) <= cuda::max_dynamic_shared_bytes();
}

void readout_cuda(const ReadoutShape& sh, const float* x, const float* y, ReadoutCell* cells, int64_t K, bool norms,
                  bool train, CudaScalarSum* loss_sums, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  using namespace cuda;
  if (!readout_cuda_supported(sh, K))
    throw std::invalid_argument("readout_cuda: shape B " + std::to_string(sh.B) + " N " + std::to_string(sh.N) + " C " +
                                std::to_string(sh.C) + " H " + std::to_string(sh.H) + ", " + std::to_string(K) +
                                " cells (expected N >= 2, 1 <= C <= 65, H dividing C, 1 to " +
                                std::to_string(kReadoutCudaMaxCells) + " cells, 2 (N - 1) floats of shared memory)");
  const int64_t B = sh.B, C = sh.C, L = sh.N - 1, G = 3 * C * C;
  // Scratch: the prompts' gradient terms and losses, then (no loss_sums) the K loss sums.
  Carver carve(ws->reserve(scratch_bytes<ReadoutScratch>(B, C, sh.H, K, train)));
  const ReadoutScratch scratch = ReadoutScratch::carve(carve, B, C, sh.H, K, train);
  float* gpart = scratch.gpart;
  double* lpart = scratch.lpart;
  CudaScalarSum* own_sums = scratch.sums;
  CudaScalarSum* sums = loss_sums != nullptr ? loss_sums : own_sums;

  PromptArgs pa{};
  ReduceArgs ra{};
  pa.x = x;
  pa.y = y;
  pa.B = static_cast<int32_t>(B);
  pa.N = static_cast<int32_t>(sh.N);
  pa.C = ra.C = static_cast<int32_t>(C);
  pa.H = ra.H = static_cast<int32_t>(sh.H);
  pa.norms = norms;
  pa.train = ra.train = train;
  pa.gpart = gpart;
  pa.lpart = lpart;
  ra.B = static_cast<int32_t>(B);
  ra.gpart = gpart;
  ra.lpart = lpart;
  ra.loss = sums;
  for (int64_t k = 0; k < K; ++k) {
    const ReadoutCell& c = cells[k];
    pa.cell[k] = DevCell{c.qkv_w, c.pred, c.attn_fro, c.jac_fro, resolve_phi(c.act, L)};
    ra.grad[k] = c.grad;
  }
  const size_t dyn = static_cast<size_t>(2 * L) * sizeof(float);
  if (dyn > 48 * 1024)
    ATTN_CUDA_CHECK(cudaFuncSetAttribute(readout_prompt_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(dyn)));
  if (B > 0) {
    ATTN_LAUNCH(dim3(static_cast<unsigned>(B), static_cast<unsigned>(K)), kThreads, dyn, stream, readout_prompt_kernel)
    (pa);
    ATTN_CUDA_CHECK_LAUNCH();
  }
  // Elements 0 .. G - 1 the gradient, G the loss; without training only the loss.
  ra.first = train ? 0 : G;
  const int64_t elems = train ? G + 1 : 1;
  const unsigned blocks = static_cast<unsigned>((elems + kThreads - 1) / kThreads);
  ATTN_LAUNCH(dim3(blocks, static_cast<unsigned>(K)), kThreads, 0, stream, readout_reduce_kernel)(ra);
  ATTN_CUDA_CHECK_LAUNCH();
  if (loss_sums != nullptr) return;
  CudaScalarSum host[kReadoutCudaMaxCells];
  ATTN_CUDA_CHECK(
      cudaMemcpyAsync(host, own_sums, static_cast<size_t>(K) * sizeof(CudaScalarSum), cudaMemcpyDeviceToHost, stream));
  ATTN_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (int64_t k = 0; k < K; ++k) cells[k].loss = B > 0 ? host[k].sum / static_cast<double>(B) : 0.0;
}

}  // namespace attnsweep
