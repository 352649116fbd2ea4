// CPU element-wise ops of kernels/ops.h: GELU (gelu_forward, gelu_backward), the
// residual add (residual_forward, residual_backward), and their row epilogues for the
// fused matmuls (kernels/cpu/rows.h: gelu_forward_rows, gelu_backward_rows,
// residual_rows). CUDA side: kernels/cuda/elementwise.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

#include "kernels/cpu/gemm.h"  // gemm_avx512_supported
#include "kernels/cpu/ops_common.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/vec512.h"

#include <algorithm>
#include <cmath>

namespace attnsweep {

using namespace cpu::rows;

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

}  // namespace attnsweep
