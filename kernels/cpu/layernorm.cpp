// CPU LayerNorm of kernels/ops.h (layernorm_forward, layernorm_backward) and its row
// kernels, which kernels/cpu/layer.cpp also runs (kernels/cpu/rows.h). CUDA side:
// kernels/cuda/layernorm.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

#include "kernels/cpu/gemm.h"  // gemm_avx512_supported
#include "kernels/cpu/ops_common.h"
#include "kernels/cpu/rows.h"
#include "kernels/cpu/vec512.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnsweep {

using namespace cpu::rows;

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

}  // namespace attnsweep
