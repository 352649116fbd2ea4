// CPU ops of kernels/ops.h. Row-parallel loops use OpenMP with static schedules; every
// reduction across rows (dweight, dbias, dwte, ...) runs serially in row order, or in
// fixed blocks of rows added in block order (LayerNorm, the fused layer), so that
// results do not depend on the thread count. The matmuls take the AVX-512 kernels of
// kernels/cpu/gemm.cpp where the CPU has them (independent of the thread count too);
// otherwise OpenBLAS with the rows split over the thread team (sgemm_rows):
// deterministic for a given thread count; OpenBLAS may pick another kernel for a
// smaller part, so another count can change the last bits.
// About 780 lines: every op of kernels/ops.h, forward beside backward, so that each
// op's CPU and CUDA (kernels/cuda/ops.cu) versions can be read against each other.
// no-trapping-math: see GELU below (we never read the FP exception flags); it must come
// before the headers so that fast_expf is compiled with it. (kernels/CMakeLists.txt also
// compiles this file with -fno-math-errno: see adamw_span.)
#pragma GCC optimize("no-trapping-math")
#include "kernels/ops.h"

#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/vec512.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnsweep {

using namespace cpu::rows;  // the row kernels shared with kernels/cpu/layer.cpp

// ---- matmul ---------------------------------------------------------------------------

namespace {

// Row passes are compiled for AVX-512 / AVX2 / baseline and picked at load time (the
// project's baseline is x86-64 SSE2), as in kernels/cpu/attention.cpp.
#define OPS_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

constexpr int64_t kBiasRows = 256;  // rows per parallel work item of the bias add

OPS_ROW_CLONES void fill_bias_rows(float* out, const float* bias, int64_t rows, int64_t OC) {
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * OC;
#pragma omp simd
    for (int64_t j = 0; j < OC; ++j) o[j] = bias[j];
  }
}

// acc[o] += sum_i x[i, o], rows in order (each column summed in row order).
OPS_ROW_CLONES void column_sums(double* acc, const float* x, int64_t N, int64_t OC) {
  for (int64_t i = 0; i < N; ++i) {
    const float* d = x + i * OC;
#pragma omp simd
    for (int64_t o = 0; o < OC; ++o) acc[o] += d[o];
  }
}

// An sgemm whose M rows are split over the OpenMP team, OpenBLAS single-threaded inside
// each part: one pool of threads (OpenMP's) instead of OpenMP's and OpenBLAS's spinning
// against each other on the same cores (on 2 shared cores that made 2 threads 2x slower
// than 1). The parts depend only on the thread count, so results are deterministic for a
// given count. C[M, Nc] = op(A)[M, K] op(B)[K, Nc] + beta C, row-major.
void sgemm_rows(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t Nc, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  auto part = [&](int64_t m0, int64_t m1) {
    if (m1 <= m0) return;
    const float* a = ta == CblasNoTrans ? A + m0 * lda : A + m0;  // op(A) row m0
    cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(m1 - m0), static_cast<int>(Nc), static_cast<int>(K), 1.0f, a,
                static_cast<int>(lda), B, static_cast<int>(ldb), beta, C + m0 * ldc, static_cast<int>(ldc));
  };
  const int nt = omp_in_parallel() ? 1 : omp_get_max_threads();
  if (nt <= 1 || M < 2 * 16) {
    part(0, M);
    return;
  }
  const int saved = openblas_get_num_threads();
  if (saved != 1) openblas_set_num_threads(1);
  const int64_t chunk = ((M + nt - 1) / nt + 15) / 16 * 16;  // whole 16-row panels
#pragma omp parallel for schedule(static) num_threads(nt)
  for (int t = 0; t < nt; ++t) part(std::min(M, t * chunk), std::min(M, (t + 1) * chunk));
  if (saved != 1) openblas_set_num_threads(saved);
}

}  // namespace

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                    int64_t OC) {
  if (cpu::gemm_avx512_usable(C, OC)) {
    cpu::matmul_forward_avx512(out, inp, weight, bias, N, C, OC);
    return;
  }
  // out = inp @ weight^T
  if (bias == nullptr) {
    sgemm_rows(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, 0.0f, out, OC);
    return;
  }
  // Rows start as the bias and the product is accumulated onto them (beta = 1): OpenBLAS
  // would otherwise zero C for beta = 0 and a second pass would add the bias.
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < (N + kBiasRows - 1) / kBiasRows; ++b)
    fill_bias_rows(out + b * kBiasRows * OC, bias, std::min(kBiasRows, N - b * kBiasRows), OC);
  sgemm_rows(CblasNoTrans, CblasTrans, N, OC, C, inp, C, weight, C, 1.0f, out, OC);
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t C, int64_t OC) {
  if (cpu::gemm_avx512_usable(C, OC)) {
    cpu::matmul_backward_avx512(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
    return;
  }
  // dinp += dout @ weight
  if (dinp != nullptr) sgemm_rows(CblasNoTrans, CblasNoTrans, N, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
  // dweight += dout^T @ inp   (rows of dweight split: each element's sum over N stays in one call)
  sgemm_rows(CblasTrans, CblasNoTrans, OC, C, N, dout, OC, inp, C, 1.0f, dweight, C);
  if (dbias != nullptr) {
    // Row by row, vectorised along OC: each column is still summed in row order (the
    // same sums as a column-at-a-time loop, without its stride-OC reads).
    std::vector<double> acc(static_cast<size_t>(OC), 0.0);
    column_sums(acc.data(), dout, N, OC);
    for (int64_t o = 0; o < OC; ++o) dbias[o] += static_cast<float>(acc[static_cast<size_t>(o)]);
  }
}

void matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* weight, int64_t N, int64_t C, int64_t OC) {
  if (cpu::gemm_avx512_usable(C, OC)) {
    cpu::matmul_backward_avx512(dinp, dweight, dbias, dout, inp, weight, N, C, OC, {}, true);
    return;
  }
  std::fill(dinp, dinp + N * C, 0.0f);
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

// ---- layernorm ------------------------------------------------------------------------
// Row kernels: explicit AVX-512 ones for C a multiple of 16 up to 128 where the CPU has
// AVX-512, else target_clones (AVX2 / baseline, see GELU) with `omp simd`; reductions in
// float32, 16 lanes at a time, as PyTorch's CPU LayerNorm computes (these
// ops wait on memory, and float64 halved the lanes: the backward was 6 % of a training
// step). The lane order is fixed by the row length, so results do not depend on the
// thread count. The parameter gradients' sums are float32 within a block of kRowBlock
// rows and float64 across blocks.

namespace {

OPS_ROW_CLONES void layernorm_forward_generic(float* out, float* mean, float* rstd, const float* inp,
                                              const float* weight, const float* bias, int64_t rows, int64_t C) {
  const float eps = 1e-5f, inv_c = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = inp + i * C;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int64_t c = 0; c < C; ++c) m += x[c];
    m *= inv_c;
    float var = 0.0f;  // biased variance, as PyTorch's LayerNorm; two passes (no cancellation)
#pragma omp simd reduction(+ : var)
    for (int64_t c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    var *= inv_c;
    const float r = 1.0f / std::sqrt(var + eps);
    float* o = out + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = r;
  }
}

// Also the block's parameter sums: sw[c] = sum_i dout * xhat, sb[c] = sum_i dout over
// these rows in order (float32 in sw, sb; overwritten), in the same pass.
OPS_ROW_CLONES void layernorm_backward_generic(float* dinp, float* sw, float* sb, const float* dout, const float* inp,
                                               const float* weight, const float* mean, const float* rstd, int64_t rows,
                                               int64_t C) {
  // dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), xhat = (x - mean) rstd,
  // dxhat = dout * weight
  const float inv_c = 1.0f / static_cast<float>(C);
  for (int64_t c = 0; c < C; ++c) sw[c] = sb[c] = 0.0f;
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    const float m = mean[i], r = rstd[i];
    float s1 = 0.0f, s2 = 0.0f;
#pragma omp simd reduction(+ : s1, s2)
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      const float dxhat = dy[c] * weight[c];
      s1 += dxhat;
      s2 += dxhat * xhat;
    }
    s1 *= inv_c;
    s2 *= inv_c;
    float* dx = dinp + i * C;
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * r;
      const float dxhat = dy[c] * weight[c];
      dx[c] += r * (dxhat - s1 - xhat * s2);
      sw[c] += dy[c] * xhat;
      sb[c] += dy[c];
    }
  }
}

// AVX-512, rows of C = 16 NV (NV <= 8: the reference cell's C = 64 is NV = 4): a row
// held in NV registers, the same formulas (two-pass variance; the lane sums then
// _mm512_reduce_add_ps's tree), the parameter sums of the backward kept in registers
// across the rows: straight-line code per row, no trip counts or remainders (LayerNorm
// 5.4 % of a training step with the generic loops, 4.0 % with these).
#define LN_AVX512 __attribute__((target("avx512f")))

template <int NV>
LN_AVX512 void layernorm_forward_avx512(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                        const float* bias, int64_t rows) {
  constexpr int64_t C = 16 * NV;
  const float eps = 1e-5f, inv_c = 1.0f / static_cast<float>(C);
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = inp + i * C;
    __m512 xv[NV];
    __m512 s = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) s = _mm512_add_ps(s, xv[v] = _mm512_loadu_ps(x + 16 * v));
    const float m = _mm512_reduce_add_ps(s) * inv_c;
    const __m512 mv = _mm512_set1_ps(m);
    __m512 q = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      xv[v] = _mm512_sub_ps(xv[v], mv);
      q = _mm512_fmadd_ps(xv[v], xv[v], q);
    }
    const float var = _mm512_reduce_add_ps(q) * inv_c;
    const float r = 1.0f / std::sqrt(var + eps);
    const __m512 rv = _mm512_set1_ps(r);
    float* o = out + i * C;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(o + 16 * v, _mm512_fmadd_ps(_mm512_mul_ps(xv[v], rv), _mm512_loadu_ps(weight + 16 * v),
                                                   _mm512_loadu_ps(bias + 16 * v)));
    mean[i] = m;
    rstd[i] = r;
  }
}

template <int NV>
LN_AVX512 void layernorm_backward_avx512(float* dinp, float* sw, float* sb, const float* dout, const float* inp,
                                         const float* weight, const float* mean, const float* rstd, int64_t rows) {
  constexpr int64_t C = 16 * NV;
  const float inv_c = 1.0f / static_cast<float>(C);
  __m512 swv[NV], sbv[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) swv[v] = sbv[v] = _mm512_setzero_ps();
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    const __m512 mv = _mm512_set1_ps(mean[i]), rv = _mm512_set1_ps(rstd[i]);
    __m512 xh[NV], dyv[NV], dxh[NV];
    __m512 s1 = _mm512_setzero_ps(), s2 = _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      xh[v] = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + 16 * v), mv), rv);
      dyv[v] = _mm512_loadu_ps(dy + 16 * v);
      dxh[v] = _mm512_mul_ps(dyv[v], _mm512_loadu_ps(weight + 16 * v));
      s1 = _mm512_add_ps(s1, dxh[v]);
      s2 = _mm512_fmadd_ps(dxh[v], xh[v], s2);
    }
    const __m512 s1v = _mm512_set1_ps(_mm512_reduce_add_ps(s1) * inv_c);
    const __m512 s2v = _mm512_set1_ps(_mm512_reduce_add_ps(s2) * inv_c);
    float* dx = dinp + i * C;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      // dx += r (dxhat - s1 - xhat s2)
      const __m512 t = _mm512_fnmadd_ps(xh[v], s2v, _mm512_sub_ps(dxh[v], s1v));
      _mm512_storeu_ps(dx + 16 * v, _mm512_fmadd_ps(rv, t, _mm512_loadu_ps(dx + 16 * v)));
      swv[v] = _mm512_fmadd_ps(dyv[v], xh[v], swv[v]);
      sbv[v] = _mm512_add_ps(sbv[v], dyv[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    _mm512_storeu_ps(sw + 16 * v, swv[v]);
    _mm512_storeu_ps(sb + 16 * v, sbv[v]);
  }
}

bool layernorm_avx512(int64_t C) {
  return cpu::gemm_avx512_supported() && C % 16 == 0 && C >= 16 && C <= 128;
}

}  // namespace

namespace cpu::rows {  // shared with kernels/cpu/layer.cpp (kernels/cpu/rows.h)

void layernorm_forward_rows(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int64_t rows, int64_t C) {
  if (!layernorm_avx512(C)) return layernorm_forward_generic(out, mean, rstd, inp, weight, bias, rows, C);
  switch (C / 16) {
    case 1: return layernorm_forward_avx512<1>(out, mean, rstd, inp, weight, bias, rows);
    case 2: return layernorm_forward_avx512<2>(out, mean, rstd, inp, weight, bias, rows);
    case 3: return layernorm_forward_avx512<3>(out, mean, rstd, inp, weight, bias, rows);
    case 4: return layernorm_forward_avx512<4>(out, mean, rstd, inp, weight, bias, rows);
    case 5: return layernorm_forward_avx512<5>(out, mean, rstd, inp, weight, bias, rows);
    case 6: return layernorm_forward_avx512<6>(out, mean, rstd, inp, weight, bias, rows);
    case 7: return layernorm_forward_avx512<7>(out, mean, rstd, inp, weight, bias, rows);
    default: return layernorm_forward_avx512<8>(out, mean, rstd, inp, weight, bias, rows);
  }
}

void layernorm_backward_rows(float* dinp, float* sw, float* sb, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t C) {
  if (!layernorm_avx512(C)) return layernorm_backward_generic(dinp, sw, sb, dout, inp, weight, mean, rstd, rows, C);
  switch (C / 16) {
    case 1: return layernorm_backward_avx512<1>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 2: return layernorm_backward_avx512<2>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 3: return layernorm_backward_avx512<3>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 4: return layernorm_backward_avx512<4>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 5: return layernorm_backward_avx512<5>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 6: return layernorm_backward_avx512<6>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    case 7: return layernorm_backward_avx512<7>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
    default: return layernorm_backward_avx512<8>(dinp, sw, sb, dout, inp, weight, mean, rstd, rows);
  }
}

}  // namespace cpu::rows

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int64_t N, int64_t C) {
  const int64_t nb = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t r0 = b * kRowBlock;
    layernorm_forward_rows(out + r0 * C, mean + r0, rstd + r0, inp + r0 * C, weight, bias, std::min(kRowBlock, N - r0),
                           C);
  }
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C) {
  const int64_t nb = (N + kRowBlock - 1) / kRowBlock;
  thread_local std::vector<float> part_buf;
  part_buf.resize(static_cast<size_t>(nb * 2 * C));
  float* part = part_buf.data();
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t r0 = b * kRowBlock;
    layernorm_backward_rows(dinp + r0 * C, part + b * 2 * C, part + b * 2 * C + C, dout + r0 * C, inp + r0 * C, weight,
                            mean + r0, rstd + r0, std::min(kRowBlock, N - r0), C);
  }
  // dweight / dbias: the blocks' partial sums (fixed blocks of kRowBlock rows, whatever
  // the thread count), added in block order in float64.
  std::vector<double> acc(static_cast<size_t>(2 * C), 0.0);
  for (int64_t b = 0; b < nb; ++b) {
    const float* pb = part + b * 2 * C;
    for (int64_t c = 0; c < 2 * C; ++c) acc[static_cast<size_t>(c)] += pb[c];
  }
  for (int64_t c = 0; c < C; ++c) {
    dweight[c] += static_cast<float>(acc[static_cast<size_t>(c)]);
    dbias[c] += static_cast<float>(acc[static_cast<size_t>(C + c)]);
  }
}

// ---- GELU (tanh approximation) --------------------------------------------------------
// 0.5 x (1 + tanh u) = x sigma(2u) exactly (1 + tanh u = 2 / (1 + e^{-2u})): one exp and
// no cancellation near u = 0, and with cpu::fast_expf the loops vectorise (libm's tanhf
// was half of a training step's time). Like kernels/cpu/attention.cpp: no-trapping-math
// (set at the top of this file) so that GCC if-converts fast_expf's clamps, and
// target_clones so that the span runs as AVX-512 / AVX2 where the CPU has them.

namespace {
constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)
constexpr int64_t kGeluBlock = 4096;           // elements per parallel work item

// The portable spans (AVX2 / baseline clones; the AVX-512 ones below are used where the
// CPU has AVX-512).
OPS_ROW_CLONES void gelu_forward_generic(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + 0.044715f * x * x * x);
    out[i] = x / (1.0f + cpu::fast_expf(-2.0f * u));
  }
}

// d/dx [x sigma(2u)] = sigma(2u) + x sigma(2u) (1 - sigma(2u)) 2 du/dx, sg = sigma(2u).
inline float gelu_grad_from(float x, float sg) {
  return sg + 2.0f * x * sg * (1.0f - sg) * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
}

inline float gelu_grad(float x) {
  const float u = kGeluK * (x + 0.044715f * x * x * x);
  const float sg = 1.0f / (1.0f + cpu::fast_expf(-2.0f * u));  // sigma(2u)
  return gelu_grad_from(x, sg);
}

OPS_ROW_CLONES void gelu_backward_generic(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

OPS_ROW_CLONES void gelu_backward_inplace_generic(float* d, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = gelu_grad(inp[i]) * d[i];
}

OPS_ROW_CLONES void gelu_backward_inplace_keep_generic(float* d, float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + 0.044715f * x * x * x);
    const float e1 = 1.0f + cpu::fast_expf(-2.0f * u);
    out[i] = x / e1;
    d[i] = gelu_grad_from(x, 1.0f / e1) * d[i];
  }
}

// The AVX-512 spans: the same formulas on 16 lanes with cpu::exp16_clamped (vscalefps:
// 30 % less time in the GELU than the auto-vectorised fast_expf), the tail masked.
#define OPS_AVX512 __attribute__((target("avx512f")))
namespace avx512 {

// sigma(2u) = 1 / (1 + e^{-2u}), u = K (x + 0.044715 x^3); gelu(x) = x sigma(2u), the
// forward and the backward's recomputation alike (one divide: the backward's two, x / e1
// and 1 / e1, kept the divider busy longer than everything else in its loop).
OPS_AVX512 inline __m512 gelu_sg(__m512 x) {
  const __m512 x2 = _mm512_mul_ps(x, x);
  const __m512 m2u =
      _mm512_mul_ps(x, _mm512_fmadd_ps(x2, _mm512_set1_ps(-2.0f * kGeluK * 0.044715f), _mm512_set1_ps(-2.0f * kGeluK)));
  return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), cpu::exp16_clamped(m2u)));
}

// gelu'(x) from sg = sigma(2u), as gelu_grad_from.
OPS_AVX512 inline __m512 gelu_grad16(__m512 x, __m512 sg) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 du = _mm512_fmadd_ps(_mm512_mul_ps(x, x), _mm512_set1_ps(2.0f * kGeluK * 3.0f * 0.044715f),
                                    _mm512_set1_ps(2.0f * kGeluK));  // 2 du/dx
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(x, sg), _mm512_sub_ps(one, sg)), du, sg);
}

inline __mmask16 tail(int64_t n) {
  return static_cast<__mmask16>((1u << n) - 1u);
}

OPS_AVX512 void gelu_forward(float* out, const float* inp, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(inp + i);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(x, gelu_sg(x)));
  }
  if (i < n) {
    const __mmask16 m = tail(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, inp + i);
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(x, gelu_sg(x)));
  }
}

// d = gelu'(inp) * dout (+ d with acc), and with out also out = gelu(inp) from the same exp.
template <bool Acc, bool Keep>
OPS_AVX512 inline void gelu_backward_at(float* d, float* out, const float* inp, const float* dout, int64_t i,
                                        __mmask16 m) {
  const __m512 x = _mm512_maskz_loadu_ps(m, inp + i);
  const __m512 sg = gelu_sg(x);
  const __m512 g = _mm512_mul_ps(gelu_grad16(x, sg), _mm512_maskz_loadu_ps(m, dout + i));
  if constexpr (Keep) _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(x, sg));
  _mm512_mask_storeu_ps(d + i, m, Acc ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, d + i), g) : g);
}

// The backward's inp (the forward's saved pre-activation) comes from memory: fetched 4 KiB
// ahead in software, the loop ran at the speed of hot data (1.1 -> 0.6 ns an element
// measured alone; the hardware prefetcher did not keep up). Prefetches past the end
// touch the rows that follow (harmless).
constexpr int64_t kGeluPrefetch = 1024;  // floats

template <bool Acc, bool Keep>
OPS_AVX512 void gelu_backward(float* d, float* out, const float* inp, const float* dout, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(inp + i + kGeluPrefetch), _MM_HINT_T0);
    gelu_backward_at<Acc, Keep>(d, out, inp, dout, i, __mmask16(0xFFFF));
  }
  if (i < n) gelu_backward_at<Acc, Keep>(d, out, inp, dout, i, tail(n - i));
}

}  // namespace avx512

void gelu_forward_span(float* out, const float* inp, int64_t n) {
  if (cpu::gemm_avx512_supported())
    avx512::gelu_forward(out, inp, n);
  else
    gelu_forward_generic(out, inp, n);
}

// dinp += gelu'(inp) * dout.
void gelu_backward_span(float* dinp, const float* inp, const float* dout, int64_t n) {
  if (cpu::gemm_avx512_supported())
    avx512::gelu_backward<true, false>(dinp, nullptr, inp, dout, n);
  else
    gelu_backward_generic(dinp, inp, dout, n);
}

// d[i] = gelu'(inp[i]) * d[i] in place (gelu_backward_span into a zeroed buffer: 0 + v = v).
void gelu_backward_inplace_span(float* d, const float* inp, int64_t n) {
  if (cpu::gemm_avx512_supported())
    avx512::gelu_backward<false, false>(d, nullptr, inp, d, n);
  else
    gelu_backward_inplace_generic(d, inp, n);
}

// The same, and out[i] = gelu(inp[i]) (gelu_forward_span's value) from the same exp: the
// fused backward recomputes the GELU's output instead of reading it back from memory.
void gelu_backward_inplace_keep_span(float* d, float* out, const float* inp, int64_t n) {
  if (cpu::gemm_avx512_supported())
    avx512::gelu_backward<false, true>(d, out, inp, d, n);
  else
    gelu_backward_inplace_keep_generic(d, out, inp, n);
}
}  // namespace

void gelu_forward(float* out, const float* inp, int64_t n) {
  const int64_t nb = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    gelu_forward_span(out + b * kGeluBlock, inp + b * kGeluBlock, std::min(kGeluBlock, n - b * kGeluBlock));
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t nb = (n + kGeluBlock - 1) / kGeluBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    gelu_backward_span(dinp + b * kGeluBlock, inp + b * kGeluBlock, dout + b * kGeluBlock,
                       std::min(kGeluBlock, n - b * kGeluBlock));
}

// ---- residual -------------------------------------------------------------------------

void residual_forward(float* out, const float* inp1, const float* inp2, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = inp1[i] + inp2[i];
}

void residual_backward(float* dinp1, float* dinp2, const float* dout, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    dinp1[i] += dout[i];
    dinp2[i] += dout[i];
  }
}

// ---- mean-pool over tokens ------------------------------------------------------------

void meanpool_forward(float* out, const float* inp, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) {
      double s = 0.0;
      for (int64_t t = 0; t < T; ++t) s += inp[(b * T + t) * C + c];
      out[b * C + c] = static_cast<float>(s / static_cast<double>(T));
    }
}

void meanpool_backward(float* dinp, const float* dout, int64_t B, int64_t T, int64_t C) {
  const float inv = 1.0f / static_cast<float>(T);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) dinp[(b * T + t) * C + c] += dout[b * C + c] * inv;
}

// ---- softmax cross-entropy ------------------------------------------------------------

double softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                    int64_t N, int64_t V) {
  double loss = 0.0;
  int64_t correct = 0;
  // Rows in parallel; the loss sum and the count in row order (reduction over a fixed
  // static partition would depend on the thread count).
  std::vector<double> row_loss(static_cast<size_t>(N));
  std::vector<char> row_ok(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    int64_t arg = 0;
    for (int64_t j = 1; j < V; ++j)
      if (x[j] > x[arg]) arg = j;
    const double mx = x[arg];
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(x[j] - mx);
    for (int64_t j = 0; j < V; ++j) probs[i * V + j] = static_cast<float>(std::exp(x[j] - mx) / z);
    row_loss[static_cast<size_t>(i)] = -(x[targets[i]] - mx - std::log(z));  // -log softmax, stable
    row_ok[static_cast<size_t>(i)] = arg == targets[i];
  }
  for (int64_t i = 0; i < N; ++i) {
    loss += row_loss[static_cast<size_t>(i)];
    correct += row_ok[static_cast<size_t>(i)];
  }
  if (n_correct != nullptr) *n_correct = correct;
  return N > 0 ? loss / static_cast<double>(N) : 0.0;
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                                   int64_t V) {
  const float s = dloss / static_cast<float>(N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j) dlogits[i * V + j] += s * (probs[i * V + j] - (j == targets[i] ? 1.0f : 0.0f));
}

// ---- MSE --------------------------------------------------------------------------------

double mse_forward(const float* pred, const float* target, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(pred[i]) - target[i];
    s += e * e;
  }
  return n > 0 ? s / static_cast<double>(n) : 0.0;
}

void mse_backward(float* dpred, const float* pred, const float* target, float dloss, int64_t n) {
  const float s = 2.0f * dloss / static_cast<float>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dpred[i] += s * (pred[i] - target[i]);
}

// ---- embeddings -------------------------------------------------------------------------

void embedding_forward(float* out, const int32_t* ids, const float* wte, const float* wpe, int64_t B, int64_t T,
                       int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* e = wte + static_cast<int64_t>(ids[bt]) * C;
    const float* p = wpe != nullptr ? wpe + (bt % T) * C : nullptr;
    for (int64_t c = 0; c < C; ++c) out[bt * C + c] = e[c] + (p != nullptr ? p[c] : 0.0f);
  }
}

void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* ids, int64_t B, int64_t T,
                        int64_t C) {
  // Scatter-adds in token order (serial): deterministic whatever the ids.
  for (int64_t bt = 0; bt < B * T; ++bt) {
    if (dwte != nullptr) {
      float* e = dwte + static_cast<int64_t>(ids[bt]) * C;
      for (int64_t c = 0; c < C; ++c) e[c] += dout[bt * C + c];
    }
    if (dwpe != nullptr) {
      float* p = dwpe + (bt % T) * C;
      for (int64_t c = 0; c < C; ++c) p[c] += dout[bt * C + c];
    }
  }
}

void patchify(float* patches, const float* img, int64_t B, int64_t Cin, int64_t Hh, int64_t W, int64_t p) {
  const int64_t ph = Hh / p, pw = W / p, P = ph * pw, D = Cin * p * p;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t py = 0; py < ph; ++py)
      for (int64_t px = 0; px < pw; ++px) {
        float* dst = patches + (b * P + py * pw + px) * D;
        for (int64_t c = 0; c < Cin; ++c)
          for (int64_t y = 0; y < p; ++y)
            for (int64_t x = 0; x < p; ++x)
              dst[(c * p + y) * p + x] = img[((b * Cin + c) * Hh + py * p + y) * W + px * p + x];
      }
}

// ---- optimizers -------------------------------------------------------------------------

namespace {
// The update of n parameters (float64 arithmetic for the bias-corrected step): a
// target_clones span, so that the float64 divide and square root run 8 lanes wide where
// the CPU has AVX-512 (scalar, AdamW was 1.2 % of a training step). It vectorises only
// without math-errno (a sqrt that may set errno is a branch in the loop; the pragma form
// of the flag does not reach the builtin), hence -fno-math-errno on this file.
OPS_ROW_CLONES void adamw_span(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, double c1, double c2) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const double mhat = m[i] / c1, vhat = v[i] / c2;
    params[i] -=
        static_cast<float>(lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * static_cast<double>(params[i])));
  }
}
constexpr int64_t kAdamBlock = 4096;  // parameters per parallel work item
}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t t) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const int64_t nb = (n + kAdamBlock - 1) / kAdamBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * kAdamBlock;
    adamw_span(params + i0, grads + i0, m + i0, v + i0, std::min(kAdamBlock, n - i0), lr, beta1, beta2, eps,
               weight_decay, c1, c2);
  }
}

void sgd_update(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] + weight_decay * params[i];
    if (momentum != 0.0f) {
      momentum_buf[i] = momentum * momentum_buf[i] + g;
      g = momentum_buf[i];
    }
    params[i] -= lr * g;
  }
}

// ---- GELU fused with the MLP's matmuls -------------------------------------------------

namespace cpu::rows {
void gelu_forward_rows(const void* ctx, float*, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const GeluForwardRows*>(ctx);
  gelu_forward_span(g.out + (r0 - g.out_row0) * g.OC, g.pre + r0 * g.OC, rows * g.OC);
}
void gelu_backward_rows(const void* ctx, float* dpre, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const GeluBackwardRows*>(ctx);
  if (g.out != nullptr)
    gelu_backward_inplace_keep_span(dpre + r0 * g.C, g.out + (r0 - g.out_row0) * g.C, g.pre + r0 * g.C, rows * g.C);
  else
    gelu_backward_inplace_span(dpre + r0 * g.C, g.pre + r0 * g.C, rows * g.C);
}
}  // namespace cpu::rows

// ---- residual fused with the projection that precedes it -------------------------------

namespace {
OPS_ROW_CLONES void add_span(float* o, const float* r, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = o[i] + r[i];
}
}  // namespace

namespace cpu::rows {
void residual_rows(const void* ctx, float* out, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const ResidualRows*>(ctx);
  add_span(out + r0 * g.OC, g.resid + r0 * g.OC, rows * g.OC);
}
}  // namespace cpu::rows

void matmul_residual_forward(float* out, const float* inp, const float* weight, const float* bias, const float* resid,
                             int64_t N, int64_t C, int64_t OC) {
  if (cpu::gemm_avx512_usable(C, OC)) {
    const ResidualRows ctx{resid, OC};
    cpu::matmul_forward_avx512(out, inp, weight, bias, N, C, OC, {residual_rows, &ctx});
    return;
  }
  matmul_forward(out, inp, weight, bias, N, C, OC);
  residual_forward(out, out, resid, N * OC);
}

void matmul_gelu_forward(float* pre, float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                         int64_t C, int64_t OC) {
  if (cpu::gemm_avx512_usable(C, OC)) {
    const GeluForwardRows ctx{pre, out, OC};
    cpu::matmul_forward_avx512(pre, inp, weight, bias, N, C, OC, {gelu_forward_rows, &ctx});
    return;
  }
  matmul_forward(pre, inp, weight, bias, N, C, OC);
  gelu_forward(out, pre, N * OC);
}

void gelu_matmul_backward(float* dpre, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* pre, const float* weight, int64_t N, int64_t C, int64_t OC) {
  const GeluBackwardRows ctx{pre, C};
  if (cpu::gemm_avx512_usable(C, OC)) {
    cpu::matmul_backward_avx512(dpre, dweight, dbias, dout, inp, weight, N, C, OC, {gelu_backward_rows, &ctx}, true);
    return;
  }
  std::fill(dpre, dpre + N * C, 0.0f);  // OpenBLAS: beta = 1 onto zeros, as the unfused path
  matmul_backward(dpre, dweight, dbias, dout, inp, weight, N, C, OC);
  const int64_t nb = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b)
    gelu_backward_rows(&ctx, dpre, b * kRowBlock, std::min(kRowBlock, N - b * kRowBlock));
}

}  // namespace attnsweep
