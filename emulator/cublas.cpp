// cuBLAS on the emulated device: the few entry points the CUDA backend calls, queued on
// the handle's stream and computed by OpenBLAS (column-major, as cuBLAS). bf16 inputs
// are widened exactly; CUBLAS_TF32_TENSOR_OP_MATH rounds both inputs to TF32 (10-bit
// mantissa, to nearest, ties away: cvt.rna.tf32.f32), as the tensor cores read them.
#include <cblas.h>
#include <cublas_v2.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "emulator/emu.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

namespace {

using attnsweep::emu::enqueue;
using attnsweep::emu::is_device_range;

float tf32(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) return x;  // inf, NaN
  b = (b + 0x1000u) & 0xffffe000u;
  std::memcpy(&x, &b, 4);
  return x;
}

// The bytes a column-major rows x cols operand with leading dimension ld spans.
size_t span(int rows, int cols, int ld, size_t elem) {
  if (rows <= 0 || cols <= 0) return 0;
  return (static_cast<size_t>(ld) * (cols - 1) + rows) * elem;
}

struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k, lda, ldb, ldc;
  float alpha, beta;
};

bool operands_ok(const Gemm& g, const void* A, const void* B, const void* C, size_t ab_elem) {
  const int ar = g.ta == CUBLAS_OP_N ? g.m : g.k, ac = g.ta == CUBLAS_OP_N ? g.k : g.m;
  const int br = g.tb == CUBLAS_OP_N ? g.k : g.n, bc = g.tb == CUBLAS_OP_N ? g.n : g.k;
  if (g.lda < std::max(1, ar) || g.ldb < std::max(1, br) || g.ldc < std::max(1, g.m)) return false;
  const size_t sa = span(ar, ac, g.lda, ab_elem), sb = span(br, bc, g.ldb, ab_elem), sc = span(g.m, g.n, g.ldc, 4);
  return (sa == 0 || is_device_range(A, sa)) && (sb == 0 || is_device_range(B, sb)) &&
         (sc == 0 || is_device_range(C, sc));
}

// C = alpha op(A) op(B) + beta C on float inputs (already rounded as the mode asks).
void sgemm(const Gemm& g, const float* A, const float* B, float* C) {
  if (g.m <= 0 || g.n <= 0) return;
  cblas_sgemm(CblasColMajor, g.ta == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              g.tb == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, g.m, g.n, g.k, g.alpha, A, g.lda, B, g.ldb, g.beta, C,
              g.ldc);
}

std::vector<float> widened(const void* p, size_t count, bool bf16, bool round_tf32) {
  std::vector<float> v(count);
  if (bf16) {
    const auto* h = static_cast<const uint16_t*>(p);
    for (size_t i = 0; i < count; ++i) {
      const uint32_t b = uint32_t{h[i]} << 16;
      std::memcpy(&v[i], &b, 4);
    }
  } else {
    std::memcpy(v.data(), p, count * 4);
    if (round_tf32)
      for (float& x : v) x = tf32(x);
  }
  return v;
}

void run_gemm(const Gemm& g, const void* A, const void* B, float* C, bool bf16, bool round_tf32) {
  const int ac = g.ta == CUBLAS_OP_N ? g.k : g.m, bc = g.tb == CUBLAS_OP_N ? g.n : g.k;
  if (!bf16 && !round_tf32) return sgemm(g, static_cast<const float*>(A), static_cast<const float*>(B), C);
  const size_t na = static_cast<size_t>(g.lda) * std::max(ac, 0), nb = static_cast<size_t>(g.ldb) * std::max(bc, 0);
  const int ar = g.ta == CUBLAS_OP_N ? g.m : g.k, br = g.tb == CUBLAS_OP_N ? g.k : g.n;
  // Only the span is read: the last column may end before lda * cols.
  std::vector<float> a = widened(A, na ? na - (g.lda - ar) : 0, bf16, round_tf32);
  std::vector<float> b = widened(B, nb ? nb - (g.ldb - br) : 0, bf16, round_tf32);
  sgemm(g, a.data(), b.data(), C);
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}
const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE (emulated: an operand outside device memory or a bad dimension)";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED (emulated: a type the emulator does not compute)";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    default: return "CUBLAS_STATUS (emulated)";
  }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                              float* C, int ldc) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const Gemm g{ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta};
  if (m < 0 || n < 0 || k < 0 || !operands_ok(g, A, B, C, 4)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool t = h->mode == CUBLAS_TF32_TENSOR_OP_MATH;
  return enqueue(h->stream, "cublasSgemm", [g, A, B, C, t] { run_gemm(g, A, B, C, false, t); }) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long int sA,
                                         const float* B, int ldb, long long int sB, const float* beta, float* C,
                                         int ldc, long long int sC, int batch) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const Gemm g{ta, tb, m, n, k, lda, ldb, ldc, *alpha, *beta};
  if (m < 0 || n < 0 || k < 0 || batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < batch; ++i)
    if (!operands_ok(g, A + i * sA, B + i * sB, C + i * sC, 4)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool t = h->mode == CUBLAS_TF32_TENSOR_OP_MATH;
  return enqueue(h->stream, "cublasSgemmStridedBatched",
                 [=] {
                   for (int i = 0; i < batch; ++i) run_gemm(g, A + i * sA, B + i * sB, C + i * sC, false, t);
                 }) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF;
  const bool f32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F;
  if (!(bf16 || f32) || Ctype != CUDA_R_32F ||
      !(compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC ||
        compute == CUBLAS_COMPUTE_32F_FAST_TF32))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  float al, be;
  std::memcpy(&al, alpha, 4);
  std::memcpy(&be, beta, 4);
  const Gemm g{ta, tb, m, n, k, lda, ldb, ldc, al, be};
  if (m < 0 || n < 0 || k < 0 || !operands_ok(g, A, B, C, bf16 ? 2 : 4)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool t = f32 && (compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                         (compute == CUBLAS_COMPUTE_32F && h->mode == CUBLAS_TF32_TENSOR_OP_MATH));
  float* c = static_cast<float*>(C);
  return enqueue(h->stream, "cublasGemmEx", [g, A, B, c, bf16, t] { run_gemm(g, A, B, c, bf16, t); }) == cudaSuccess
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // extern "C"
