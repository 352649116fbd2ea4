// CUDA matmuls of kernels/ops_cuda.h (cuBLAS; matmul_forward_cuda, matmul_backward_cuda),
// the workspace's precision and the bfloat16 conversions. CPU side: kernels/cpu/matmul.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

#include <climits>
#include <stdexcept>
#include <string>

namespace attnsweep::cuda {
namespace {

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

}  // namespace attnsweep
