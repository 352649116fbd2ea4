// CPU ops of kernels/ops.h. Row-parallel loops use OpenMP with static schedules; every
// reduction across rows (dweight, dbias, dwte, ...) runs serially in row order, or in
// fixed blocks of rows added in block order (LayerNorm, the fused layer), so that
// results do not depend on the thread count. The matmuls take the AVX-512 kernels of
// kernels/cpu/gemm.cpp where the CPU has them (independent of the thread count too);
// otherwise OpenBLAS with the rows split over the thread team (sgemm_rows):
// deterministic for a given thread count; OpenBLAS may pick another kernel for a
// smaller part, so another count can change the last bits.
// no-trapping-math: see GELU below (we never read the FP exception flags); it must come
// before the headers so that fast_expf is compiled with it.
#pragma GCC optimize("no-trapping-math")
#include "kernels/ops.h"

#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vec.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

namespace attnsweep {

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
// Row kernels are target_clones (AVX-512 / AVX2 / baseline, see GELU) with `omp simd`
// reductions in float32, 16 lanes at a time, as PyTorch's CPU LayerNorm computes (these
// ops wait on memory, and float64 halved the lanes: the backward was 6 % of a training
// step). The lane order is fixed by the row length, so results do not depend on the
// thread count. The parameter gradients' sums are float32 within a block of kRowBlock
// rows and float64 across blocks.

namespace {

OPS_ROW_CLONES void layernorm_forward_rows(float* out, float* mean, float* rstd, const float* inp,
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
OPS_ROW_CLONES void layernorm_backward_rows(float* dinp, float* sw, float* sb, const float* dout, const float* inp,
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

constexpr int64_t kRowBlock = 64;  // rows per parallel work item

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C) {
  const int64_t nb = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t r0 = b * kRowBlock;
    layernorm_forward_rows(out + r0 * C, mean + r0, rstd + r0, inp + r0 * C, weight, bias,
                           std::min(kRowBlock, N - r0), C);
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
constexpr int64_t kGeluBlock = 4096;            // elements per parallel work item

OPS_ROW_CLONES void gelu_forward_span(float* out, const float* inp, int64_t n) {
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

OPS_ROW_CLONES void gelu_backward_span(float* dinp, const float* inp, const float* dout, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dinp[i] += gelu_grad(inp[i]) * dout[i];
}

// d[i] = gelu'(inp[i]) * d[i] in place: gelu_backward_span into a zeroed buffer (0 + v = v).
OPS_ROW_CLONES void gelu_backward_inplace_span(float* d, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = gelu_grad(inp[i]) * d[i];
}

// The same, and out[i] = gelu(inp[i]) (gelu_forward_span's value) from the same exp: the
// fused backward recomputes the GELU's output instead of reading it back from memory.
OPS_ROW_CLONES void gelu_backward_inplace_keep_span(float* d, float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float u = kGeluK * (x + 0.044715f * x * x * x);
    const float e1 = 1.0f + cpu::fast_expf(-2.0f * u);
    out[i] = x / e1;
    d[i] = gelu_grad_from(x, 1.0f / e1) * d[i];
  }
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
    for (int64_t j = 0; j < V; ++j)
      dlogits[i * V + j] += s * (probs[i * V + j] - (j == targets[i] ? 1.0f : 0.0f));
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

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const double mhat = m[i] / c1, vhat = v[i] / c2;
    params[i] -= static_cast<float>(lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * static_cast<double>(params[i])));
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

namespace {
// out holds rows from out_row0 on (a whole buffer: 0; a block's scratch: its first row).
struct GeluForwardRows {
  const float* pre;
  float* out;
  int64_t OC;
  int64_t out_row0 = 0;
};
void gelu_forward_rows(const void* ctx, float*, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const GeluForwardRows*>(ctx);
  gelu_forward_span(g.out + (r0 - g.out_row0) * g.OC, g.pre + r0 * g.OC, rows * g.OC);
}
// With out: also gelu(pre) into out (rows from out_row0 on), recomputed.
struct GeluBackwardRows {
  const float* pre;
  int64_t C;
  float* out = nullptr;
  int64_t out_row0 = 0;
};
void gelu_backward_rows(const void* ctx, float* dpre, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const GeluBackwardRows*>(ctx);
  if (g.out != nullptr)
    gelu_backward_inplace_keep_span(dpre + r0 * g.C, g.out + (r0 - g.out_row0) * g.C, g.pre + r0 * g.C, rows * g.C);
  else
    gelu_backward_inplace_span(dpre + r0 * g.C, g.pre + r0 * g.C, rows * g.C);
}
}  // namespace

// ---- residual fused with the projection that precedes it -------------------------------

namespace {
struct ResidualRows {
  const float* resid;
  int64_t OC;
};
OPS_ROW_CLONES void add_span(float* o, const float* r, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) o[i] = o[i] + r[i];
}
void residual_rows(const void* ctx, float* out, int64_t r0, int64_t rows) {
  const auto& g = *static_cast<const ResidualRows*>(ctx);
  add_span(out + r0 * g.OC, g.resid + r0 * g.OC, rows * g.OC);
}
}  // namespace

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
  for (int64_t b = 0; b < nb; ++b) gelu_backward_rows(&ctx, dpre, b * kRowBlock, std::min(kRowBlock, N - b * kRowBlock));
}

// ---- one transformer layer's forward and backward, fused over blocks of samples ---------

namespace {
// ATTNSWEEP_CPU_LAYER_FUSION=0 in the environment: off from the start (A/B timing).
bool layer_fusion_default() {
  const char* v = std::getenv("ATTNSWEEP_CPU_LAYER_FUSION");
  return v == nullptr || std::strcmp(v, "0") != 0;
}
std::atomic<bool> g_layer_fusion{layer_fusion_default()};
}  // namespace

void set_layer_fusion_cpu(bool on) { g_layer_fusion.store(on); }

namespace {
// Samples per block of the fused layer: ~256 rows, whose activations (~(10 C + 2 F)
// floats a row: 1 MiB at C = 64, F = 256) stay in a core's L2 from one op to the next.
// A function of T only: the backward's sums do not depend on the thread count.
int64_t layer_block_samples(int64_t T) { return std::max<int64_t>(1, 256 / std::max<int64_t>(T, 1)); }

// For each (dst, offset, n) of `sums`: dst[i] += sum over blocks b, in order, in float64,
// of parts[b * stride + offset + i], i < n. Chunks of 512 elements in parallel, each read
// block by block (contiguous lines, not one float per line of every block).
struct BlockSum {
  float* dst;
  int64_t offset, n;
};
void add_block_sums(std::initializer_list<BlockSum> sums, const float* parts, int64_t stride, int64_t nblocks) {
  constexpr int64_t kChunk = 512;
  // The calling thread's list (no allocation once warm), read by the team through a
  // plain pointer: a thread_local named inside the region would be each thread's own.
  thread_local std::vector<std::pair<const BlockSum*, int64_t>> chunk_list;
  chunk_list.clear();
  for (const BlockSum& s : sums)
    for (int64_t i0 = 0; i0 < s.n; i0 += kChunk) chunk_list.emplace_back(&s, i0);
  const std::pair<const BlockSum*, int64_t>* chunks = chunk_list.data();
  const int64_t nchunks = static_cast<int64_t>(chunk_list.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nchunks; ++k) {
    const BlockSum& s = *chunks[k].first;
    const int64_t i0 = chunks[k].second, n = std::min(kChunk, s.n - i0);
    double acc[kChunk];
    for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* p = parts + b * stride + s.offset + i0;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) acc[i] += p[i];
    }
    for (int64_t i = 0; i < n; ++i) s.dst[i0 + i] += static_cast<float>(acc[i]);
  }
}
void add_block_sums(float* dst, const double* parts, int64_t stride, int64_t nblocks, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0.0;
    for (int64_t b = 0; b < nblocks; ++b) acc += parts[b * stride + i];
    dst[i] += static_cast<float>(acc);
  }
}
}  // namespace

bool layer_forward_fused_cpu_usable(const AttentionSpec& spec, const AttentionShape& shape, int64_t F) {
  const int64_t C = shape.H * shape.d;
  return g_layer_fusion.load() && attention_packed_cpu_usable(spec, shape) && cpu::gemm_avx512_usable(C, 3 * C) &&
         cpu::gemm_avx512_usable(C, C) && cpu::gemm_avx512_usable(C, F) && cpu::gemm_avx512_usable(F, C);
}

void layer_forward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                             const LayerForwardArgs& a) {
  const int64_t B = shape.B, T = shape.Nq, C = shape.H * shape.d;
  // The four weights packed once (as each matmul_forward_avx512 call would).
  thread_local AlignedScratch pq, pp, pf, pf2;
  float* bq = pq.get(static_cast<size_t>(cpu::packed_weight_floats(C, 3 * C)));
  float* bp = pp.get(static_cast<size_t>(cpu::packed_weight_floats(C, C)));
  float* bf = pf.get(static_cast<size_t>(cpu::packed_weight_floats(C, F)));
  float* bf2 = pf2.get(static_cast<size_t>(cpu::packed_weight_floats(F, C)));
  cpu::pack_weight_forward(bq, a.qkv_w, C, 3 * C);
  cpu::pack_weight_forward(bp, a.proj_w, C, C);
  cpu::pack_weight_forward(bf, a.fc_w, C, F);
  cpu::pack_weight_forward(bf2, a.fcproj_w, F, C);
  const int64_t per = layer_block_samples(T), nblocks = (B + per - 1) / per;
  const ResidualRows res1_ctx{a.inp, C};
#pragma omp parallel
  {
  // Without a.fch_gelu the GELU's output lives only in this per-thread block scratch,
  // from which fcproj reads it (the backward recomputes it).
  thread_local AlignedScratch gelu_scratch;
  float* hb = a.fch_gelu == nullptr ? gelu_scratch.get(static_cast<size_t>(per * T * F)) : nullptr;
#pragma omp for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * per, b1 = std::min(B, b0 + per);
    const int64_t r0 = b0 * T, rows = (b1 - b0) * T;
    float* h = hb != nullptr ? hb : a.fch_gelu + r0 * F;  // rows [r0, r0 + rows) of gelu(fch)
    const GeluForwardRows gelu_ctx{a.fch, h, F, r0};
    const ResidualRows res2_ctx{a.res1 + r0 * C, C};
    for (int64_t g = r0; g < r0 + rows; g += kRowBlock) {
      const int64_t n = std::min(kRowBlock, r0 + rows - g);
      layernorm_forward_rows(a.ln1 + g * C, a.ln1_mean + g, a.ln1_rstd + g, a.inp + g * C, a.ln1_w, a.ln1_b, n, C);
    }
    cpu::matmul_rows_avx512(a.qkv, a.ln1, bq, a.qkv_b, r0, rows, C, 3 * C);
    attention_forward_packed_samples_cpu(spec, shape, a.qkv, a.atty, a.lse, a.attn_fro, a.jac_fro, b0, b1);
    cpu::matmul_rows_avx512(a.res1, a.atty, bp, a.proj_b, r0, rows, C, C, {residual_rows, &res1_ctx});
    for (int64_t g = r0; g < r0 + rows; g += kRowBlock) {
      const int64_t n = std::min(kRowBlock, r0 + rows - g);
      layernorm_forward_rows(a.ln2 + g * C, a.ln2_mean + g, a.ln2_rstd + g, a.res1 + g * C, a.ln2_w, a.ln2_b, n, C);
    }
    cpu::matmul_rows_avx512(a.fch, a.ln2, bf, a.fc_b, r0, rows, C, F, {gelu_forward_rows, &gelu_ctx});
    cpu::matmul_rows_avx512(a.res2 + r0 * C, h, bf2, a.fcproj_b, 0, rows, F, C, {residual_rows, &res2_ctx});
  }
  }
}

void layer_backward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                              const LayerBackwardArgs& a) {
  const int64_t B = shape.B, T = shape.Nq, C = shape.H * shape.d;
  thread_local AlignedScratch pq, pp, pf, pf2, parts_buf;
  thread_local std::vector<double> dbparts_buf;
  // The weights packed for dinp = dout @ W.
  float* bq = pq.get(static_cast<size_t>(cpu::packed_weight_floats(3 * C, C)));
  float* bp = pp.get(static_cast<size_t>(cpu::packed_weight_floats(C, C)));
  float* bf = pf.get(static_cast<size_t>(cpu::packed_weight_floats(F, C)));
  float* bf2 = pf2.get(static_cast<size_t>(cpu::packed_weight_floats(C, F)));
  cpu::pack_weight_dinp(bq, a.qkv_w, C, 3 * C);
  cpu::pack_weight_dinp(bp, a.proj_w, C, C);
  cpu::pack_weight_dinp(bf, a.fc_w, C, F);
  cpu::pack_weight_dinp(bf2, a.fcproj_w, F, C);
  const int64_t per = layer_block_samples(T), nblocks = (B + per - 1) / per;
  const int64_t G = (per * T + kRowBlock - 1) / kRowBlock;  // LayerNorm row groups per block
  // One block's shares, floats: dW of fcproj (C, F), fc (F, C), proj (C, C), qkv (3C, C),
  // then LN2's and LN1's (sw, sb) per row group; doubles: the four dbias.
  const int64_t o_fcproj = 0, o_fc = o_fcproj + C * F, o_proj = o_fc + F * C, o_qkv = o_proj + C * C,
                o_ln2 = o_qkv + 3 * C * C, o_ln1 = o_ln2 + G * 2 * C, stride = o_ln1 + G * 2 * C;
  const int64_t d_fcproj = 0, d_fc = d_fcproj + cpu::dbias_partial_doubles(C),
                d_proj = d_fc + cpu::dbias_partial_doubles(F), d_qkv = d_proj + cpu::dbias_partial_doubles(C),
                dstride = d_qkv + cpu::dbias_partial_doubles(3 * C);
  float* parts = parts_buf.get(static_cast<size_t>(nblocks * stride));
  dbparts_buf.resize(static_cast<size_t>(nblocks * dstride));
  double* dbparts = dbparts_buf.data();
#pragma omp parallel
  {
  // Without a.fch_gelu the GELU's output is recomputed per block into this scratch, by
  // the pass that forms dbig (the same exp), instead of read back from memory.
  thread_local AlignedScratch gelu_scratch;
  float* hb = a.fch_gelu == nullptr ? gelu_scratch.get(static_cast<size_t>(per * T * F)) : nullptr;
#pragma omp for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < nblocks; ++blk) {
    const int64_t b0 = blk * per, b1 = std::min(B, b0 + per);
    const int64_t r0 = b0 * T, rows = (b1 - b0) * T;
    float* part = parts + blk * stride;
    double* dbpart = dbparts + blk * dstride;
    // fcproj through the GELU: dbig = gelu'(fch) (dres @ W_fcproj); dW_fcproj = dres^T gelu(fch).
    const GeluBackwardRows gelu_ctx{a.fch, F, hb, r0};
    cpu::dinp_rows_avx512(a.dbig, a.dres, bf2, r0, rows, F, C, {gelu_backward_rows, &gelu_ctx});
    const float* h = hb != nullptr ? hb : a.fch_gelu + r0 * F;
    cpu::dweight_rows_partial_avx512(part + o_fcproj, dbpart + d_fcproj, a.dres + r0 * C, h, 0, rows, F, C);
    // fc: dln = dbig @ W_fc; dW_fc = dbig^T ln2.
    cpu::dinp_rows_avx512(a.dln, a.dbig, bf, r0, rows, C, F);
    cpu::dweight_rows_partial_avx512(part + o_fc, dbpart + d_fc, a.dbig, a.ln2, r0, rows, C, F);
    // LN2: dres += d/d res1 through the LayerNorm.
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i0 = r0 + g * kRowBlock, n = std::min(kRowBlock, r0 + rows - i0);
      float* sw = part + o_ln2 + g * 2 * C;
      if (n <= 0) {
        std::fill(sw, sw + 2 * C, 0.0f);
        continue;
      }
      layernorm_backward_rows(a.dres + i0 * C, sw, sw + C, a.dln + i0 * C, a.res1 + i0 * C, a.ln2_w, a.ln2_mean + i0,
                              a.ln2_rstd + i0, n, C);
    }
    // proj: dln = dres @ W_proj (d/d atty); dW_proj = dres^T atty.
    cpu::dinp_rows_avx512(a.dln, a.dres, bp, r0, rows, C, C);
    cpu::dweight_rows_partial_avx512(part + o_proj, dbpart + d_proj, a.dres, a.atty, r0, rows, C, C);
    // attention: dqkv of these samples.
    attention_backward_packed_samples_cpu(spec, shape, a.qkv, a.atty, a.dln, a.lse, a.dqkv, b0, b1);
    // qkv: dln = dqkv @ W_qkv; dW_qkv = dqkv^T ln1.
    cpu::dinp_rows_avx512(a.dln, a.dqkv, bq, r0, rows, C, 3 * C);
    cpu::dweight_rows_partial_avx512(part + o_qkv, dbpart + d_qkv, a.dqkv, a.ln1, r0, rows, C, 3 * C);
    // LN1: dres += d/d inp through the LayerNorm (dres already holds the residual path).
    for (int64_t g = 0; g < G; ++g) {
      const int64_t i0 = r0 + g * kRowBlock, n = std::min(kRowBlock, r0 + rows - i0);
      float* sw = part + o_ln1 + g * 2 * C;
      if (n <= 0) {
        std::fill(sw, sw + 2 * C, 0.0f);
        continue;
      }
      layernorm_backward_rows(a.dres + i0 * C, sw, sw + C, a.dln + i0 * C, a.inp + i0 * C, a.ln1_w, a.ln1_mean + i0,
                              a.ln1_rstd + i0, n, C);
    }
  }
  }
  // The blocks' shares, added in block order.
  add_block_sums({{a.g_fcproj_w, o_fcproj, C * F}, {a.g_fc_w, o_fc, F * C}, {a.g_proj_w, o_proj, C * C},
                  {a.g_qkv_w, o_qkv, 3 * C * C}},
                 parts, stride, nblocks);
  add_block_sums(a.g_fcproj_b, dbparts + d_fcproj, dstride, nblocks, C);
  add_block_sums(a.g_fc_b, dbparts + d_fc, dstride, nblocks, F);
  add_block_sums(a.g_proj_b, dbparts + d_proj, dstride, nblocks, C);
  add_block_sums(a.g_qkv_b, dbparts + d_qkv, dstride, nblocks, 3 * C);
  // LayerNorm: the groups of every block in order (float32 within a group, float64 across).
  for (const auto& [o, gw, gb] : {std::tuple{o_ln2, a.g_ln2_w, a.g_ln2_b}, std::tuple{o_ln1, a.g_ln1_w, a.g_ln1_b}}) {
    thread_local std::vector<double> acc;
    acc.assign(static_cast<size_t>(2 * C), 0.0);
    for (int64_t blk = 0; blk < nblocks; ++blk)
      for (int64_t g = 0; g < G; ++g) {
        const float* pg = parts + blk * stride + o + g * 2 * C;
        for (int64_t c = 0; c < 2 * C; ++c) acc[static_cast<size_t>(c)] += pg[c];
      }
    for (int64_t c = 0; c < C; ++c) {
      gw[c] += static_cast<float>(acc[static_cast<size_t>(c)]);
      gb[c] += static_cast<float>(acc[static_cast<size_t>(C + c)]);
    }
  }
}

}  // namespace attnsweep
