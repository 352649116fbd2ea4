// The materialising CUDA path, the GPU oracle: S = Q K^T * scale and the backward
// products with cuBLAS (strided-batched over B*H, plain FP32), phi / softmax / phi' and
// the per-row norm partials in one block per score row, norms reduced by a second kernel.
#include "kernels/cuda/attention_common.cuh"

#include <cmath>
#include <stdexcept>

namespace attnsweep {
namespace {

using cuda::make_mask;
using cuda::MaskInfo;
using cuda::score_scale;

constexpr int kRowThreads = 256;

// Fixed-shape tree reductions over one block (deterministic).
template <class T, class Op>
__device__ T block_reduce(T v, T* scratch, Op op) {
  const int tid = threadIdx.x;
  scratch[tid] = v;
  __syncthreads();
  for (int off = kRowThreads / 2; off > 0; off >>= 1) {
    if (tid < off) scratch[tid] = op(scratch[tid], scratch[tid + off]);
    __syncthreads();
  }
  const T r = scratch[0];
  __syncthreads();
  return r;
}

struct Sum {
  template <class T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct RowIndex {
  int64_t row, b, i;
};
__device__ RowIndex row_index(int64_t H, int64_t Nq) {
  RowIndex r;
  r.row = blockIdx.x;
  const int64_t bh = r.row / Nq;
  r.i = r.row - bh * Nq;
  r.b = bh / H;
  return r;
}

// Forward, one block per score row: S (scaled) -> P in place, lse, row norm partials.
__global__ void __launch_bounds__(kRowThreads)
    ref_forward_rows(ActivationSpec act, MaskInfo mask, int64_t H, float* __restrict__ SP, float* __restrict__ lse,
                     double* __restrict__ row_attn, double* __restrict__ row_jac) {
  __shared__ double dscratch[kRowThreads];
  __shared__ float fscratch[kRowThreads];
  const RowIndex r = row_index(H, mask.Nq);
  const int64_t Nk = mask.Nk;
  float* s = SP + r.row * Nk;
  const int64_t n = mask.n_attended(r.b, r.i);
  const int64_t end = mask.key_end(r.i);
  const PhiParams pp = resolve_phi(act, n);
  auto valid = [&](int64_t j) { return n > 0 && j < end && mask.key_allowed(r.b, j); };

  double attn = 0.0, jac = 0.0;
  if (act.activation == Activation::softmax) {
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads)
      if (valid(j)) m = fmaxf(m, s[j]);
    m = block_reduce(m, fscratch, Max{});
    double z = 0.0, a2 = 0.0, a3 = 0.0;
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads) {
      if (!valid(j)) continue;
      const double e = exp(static_cast<double>(s[j]) - static_cast<double>(m));
      z += e;
      a2 += e * e;
      a3 += e * e * e;
    }
    z = block_reduce(z, dscratch, Sum{});
    a2 = block_reduce(a2, dscratch, Sum{});
    a3 = block_reduce(a3, dscratch, Sum{});
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads)
      s[j] = valid(j) ? static_cast<float>(exp(static_cast<double>(s[j]) - static_cast<double>(m)) / z) : 0.0f;
    if (n > 0) {
      const RowNormSq rn = softmax_row_norms_from_sums(z, a2, a3);
      attn = rn.attn;
      jac = rn.jac;
    }
    if (lse && threadIdx.x == 0) lse[r.row] = n > 0 ? static_cast<float>(m + log(z)) : -INFINITY;
  } else {
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads) {
      if (valid(j)) {
        const double v = phi_elementwise<double>(pp, static_cast<double>(s[j]));
        const double g = dphi_elementwise<double>(pp, static_cast<double>(s[j]));
        attn += v * v;
        jac += g * g;
        s[j] = static_cast<float>(v);
      } else {
        s[j] = 0.0f;
      }
    }
    attn = block_reduce(attn, dscratch, Sum{});
    jac = block_reduce(jac, dscratch, Sum{});
  }
  if (row_attn && threadIdx.x == 0) {
    row_attn[r.row] = attn;
    row_jac[r.row] = jac;
  }
}

// Backward, one block per row: S (scaled) -> P in place, dP -> dS in place.
// softmax: dS = P o (dP - D), D_i = sum_j P_ij dP_ij; element-wise: dS = phi'(S) o dP.
__global__ void __launch_bounds__(kRowThreads)
    ref_backward_rows(ActivationSpec act, MaskInfo mask, int64_t H, const float* __restrict__ lse,
                      float* __restrict__ SP, float* __restrict__ dPdS) {
  __shared__ double dscratch[kRowThreads];
  const RowIndex r = row_index(H, mask.Nq);
  const int64_t Nk = mask.Nk;
  float* s = SP + r.row * Nk;
  float* dp = dPdS + r.row * Nk;
  const int64_t n = mask.n_attended(r.b, r.i);
  const int64_t end = mask.key_end(r.i);
  const PhiParams pp = resolve_phi(act, n);
  auto valid = [&](int64_t j) { return n > 0 && j < end && mask.key_allowed(r.b, j); };

  if (act.activation == Activation::softmax) {
    const float l = lse[r.row];
    double dsum = 0.0;
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads) {
      const float p = valid(j) ? expf(s[j] - l) : 0.0f;
      s[j] = p;
      dsum += static_cast<double>(p) * dp[j];
    }
    const float D = static_cast<float>(block_reduce(dsum, dscratch, Sum{}));
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads) dp[j] = s[j] * (dp[j] - D);
  } else {
    for (int64_t j = threadIdx.x; j < Nk; j += kRowThreads) {
      if (valid(j)) {
        const float x = s[j];
        s[j] = phi_elementwise<float>(pp, x);
        dp[j] = dphi_elementwise<float>(pp, x) * dp[j];
      } else {
        s[j] = 0.0f;
        dp[j] = 0.0f;
      }
    }
  }
}

// Row-major C[m,n] = alpha * op(A) op(B) for each of `batch` matrices, written as the
// column-major product C^T = op(B)^T op(A)^T that cuBLAS computes.
struct RowMajor {
  const float* p;
  int64_t rows, cols;  // of the stored row-major matrix
  bool trans;          // use its transpose
  int64_t stride;
};
void gemm_rm(cublasHandle_t h, int64_t batch, float alpha, RowMajor A, RowMajor B, float* C, int64_t strideC) {
  const int64_t m = A.trans ? A.cols : A.rows;
  const int64_t k = A.trans ? A.rows : A.cols;
  const int64_t n = B.trans ? B.rows : B.cols;
  const float beta = 0.0f;
  // Column-major view: a stored row-major X (r x c) is X^T (c x r) with ld = c.
  ATTN_CUBLAS_CHECK(cublasSgemmStridedBatched(
      h, B.trans ? CUBLAS_OP_T : CUBLAS_OP_N, A.trans ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, B.p, static_cast<int>(B.cols), B.stride, A.p,
      static_cast<int>(A.cols), A.stride, &beta, C, static_cast<int>(n), strideC, static_cast<int>(batch)));
}

void check_shape(const AttentionShape& sh) {
  if (sh.B < 0 || sh.H < 0 || sh.Nq < 0 || sh.Nk < 0 || sh.d < 1 || sh.dv < 1)
    throw std::invalid_argument("attention (CUDA): bad shape");
  if (sh.Nq > (1 << 30) || sh.Nk > (1 << 30) || sh.B * sh.H * sh.Nq > (int64_t{1} << 31) - 1)
    throw std::invalid_argument("attention (CUDA ref): shape too large for the materialising path");
}

}  // namespace

void attention_forward_cuda_ref(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K,
                                const float* V, const float* key_mask, float* O, float* lse, double* attn_fro,
                                double* jac_fro, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  check_shape(sh);
  const int64_t BH = sh.B * sh.H;
  if (BH == 0 || sh.Nq == 0) return;
  if (sh.Nk == 0) throw std::invalid_argument("attention (CUDA ref): Nk == 0 is not supported");
  ATTN_CUBLAS_CHECK(cublasSetStream(ws->cublas, stream));
  const bool norms = spec.collect_norms && attn_fro && jac_fro;
  Carver carve(ws->reserve(scratch_bytes<AttentionRefFwdScratch>(sh.B, sh.H, sh.Nq, sh.Nk)));
  const AttentionRefFwdScratch s = AttentionRefFwdScratch::carve(carve, sh.B, sh.H, sh.Nq, sh.Nk);
  float* S = s.S;
  double* row_attn = s.row_attn;
  double* row_jac = s.row_jac;
  int32_t* prefix = s.prefix;
  const MaskInfo mask = make_mask(spec, sh, key_mask, prefix, stream);

  // S = Q K^T * scale   (B*H of [Nq,d] x [d,Nk])
  gemm_rm(ws->cublas, BH, score_scale(spec, sh), {Q, sh.Nq, sh.d, false, sh.Nq * sh.d},
          {K, sh.Nk, sh.d, true, sh.Nk * sh.d}, S, sh.Nq * sh.Nk);
  ATTN_LAUNCH(static_cast<unsigned>(BH * sh.Nq), kRowThreads, 0, stream, ref_forward_rows)
  (spec.act, mask, sh.H, S, lse, norms ? row_attn : nullptr, norms ? row_jac : nullptr);
  ATTN_CUDA_CHECK_LAUNCH();
  // O = P V   ([Nq,Nk] x [Nk,dv])
  gemm_rm(ws->cublas, BH, 1.0f, {S, sh.Nq, sh.Nk, false, sh.Nq * sh.Nk}, {V, sh.Nk, sh.dv, false, sh.Nk * sh.dv}, O,
          sh.Nq * sh.dv);
  if (norms) cuda::launch_norm_reduce(row_attn, row_jac, BH, sh.Nq, attn_fro, jac_fro, stream);
}

void attention_backward_cuda_ref(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K,
                                 const float* V, const float* key_mask, const float* /*O*/, const float* dO,
                                 const float* lse, float* dQ, float* dK, float* dV, AttentionCudaWorkspace* ws,
                                 cudaStream_t stream) {
  check_shape(sh);
  const int64_t BH = sh.B * sh.H;
  if (BH == 0) return;
  if (sh.Nk == 0 || sh.Nq == 0) throw std::invalid_argument("attention (CUDA ref): Nq == 0 or Nk == 0");
  if (spec.act.activation == Activation::softmax && !lse)
    throw std::invalid_argument("attention backward (CUDA ref): softmax needs lse");
  ATTN_CUBLAS_CHECK(cublasSetStream(ws->cublas, stream));
  Carver carve(ws->reserve(scratch_bytes<AttentionRefBwdScratch>(sh.B, sh.H, sh.Nq, sh.Nk)));
  const AttentionRefBwdScratch s = AttentionRefBwdScratch::carve(carve, sh.B, sh.H, sh.Nq, sh.Nk);
  float* S = s.S;
  float* dP = s.dP;
  int32_t* prefix = s.prefix;
  const MaskInfo mask = make_mask(spec, sh, key_mask, prefix, stream);
  const float scale = score_scale(spec, sh);
  const int64_t sQ = sh.Nq * sh.d, sK = sh.Nk * sh.d, sV = sh.Nk * sh.dv, sO = sh.Nq * sh.dv, sS = sh.Nq * sh.Nk;

  gemm_rm(ws->cublas, BH, scale, {Q, sh.Nq, sh.d, false, sQ}, {K, sh.Nk, sh.d, true, sK}, S, sS);  // S = Q K^T * scale
  gemm_rm(ws->cublas, BH, 1.0f, {dO, sh.Nq, sh.dv, false, sO}, {V, sh.Nk, sh.dv, true, sV}, dP, sS);  // dP = dO V^T
  ATTN_LAUNCH(static_cast<unsigned>(BH * sh.Nq), kRowThreads, 0, stream, ref_backward_rows)
  (spec.act, mask, sh.H, lse, S, dP);
  ATTN_CUDA_CHECK_LAUNCH();
  gemm_rm(ws->cublas, BH, scale, {dP, sh.Nq, sh.Nk, false, sS}, {K, sh.Nk, sh.d, false, sK}, dQ,
          sQ);  // dQ = dS K * scale
  gemm_rm(ws->cublas, BH, scale, {dP, sh.Nq, sh.Nk, true, sS}, {Q, sh.Nq, sh.d, false, sQ}, dK,
          sK);  // dK = dS^T Q * scale
  gemm_rm(ws->cublas, BH, 1.0f, {S, sh.Nq, sh.Nk, true, sS}, {dO, sh.Nq, sh.dv, false, sO}, dV, sV);  // dV = P^T dO
}

}  // namespace attnsweep
