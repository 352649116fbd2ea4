// CPU matmuls of kernels/ops.h (matmul_forward, matmul_backward, matmul_backward_overwrite)
// and the composites that fuse a matmul with the op after it (matmul_residual_forward,
// matmul_gelu_forward, gelu_matmul_backward). They take the AVX-512 kernels of
// kernels/cpu/gemm.cpp where the CPU has them (independent of the thread count);
// otherwise OpenBLAS with the rows split over the thread team (sgemm_rows):
// deterministic for a given thread count; OpenBLAS may pick another kernel for a
// smaller part, so another count can change the last bits. CUDA side: kernels/cuda/matmul.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

#include <cblas.h>
#include <omp.h>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops_common.h"
#include "kernels/cpu/rows.h"

#include <algorithm>
#include <vector>

namespace attnsweep {

using namespace cpu::rows;

// ---- matmul ---------------------------------------------------------------------------

namespace {

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

// ---- the matmuls fused with what follows them (rows.h epilogues) ---------------------

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
