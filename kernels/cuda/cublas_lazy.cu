// cuBLAS, loaded on first use. Linking libcublas (and libcublasLt, ~700 MB mapped)
// costs every process ~50 ms of start-up, and most `attnsweep train` children run on
// the CPU: a sweep of small cells paid it per cell. These definitions of the few
// cuBLAS entry points we call dlopen the library the first time one is used.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

void* cublas_library() {
  static void* handle = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    const std::string so = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
    for (const std::string& path :
         {so, "/usr/local/cuda/lib64/" + so, "/usr/local/cuda/lib/" + so, std::string("libcublas.so")}) {
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
    }
  });
  return handle;
}

template <class Fn>
Fn symbol(const char* name) {
  void* lib = cublas_library();
  return lib ? reinterpret_cast<Fn>(dlsym(lib, name)) : nullptr;
}

}  // namespace

#define ATTNSWEEP_CUBLAS_FORWARD(ret, name, params, args, fail) \
  extern "C" ret CUBLASWINAPI name params {                     \
    using Fn = ret(CUBLASWINAPI*) params;                       \
    static Fn fn = symbol<Fn>(#name);                           \
    return fn ? fn args : fail;                                 \
  }

ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasCreate_v2, (cublasHandle_t * handle), (handle),
                         CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasDestroy_v2, (cublasHandle_t handle), (handle),
                         CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                         (handle, stream), CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasSetMathMode, (cublasHandle_t handle, cublasMath_t mode), (handle, mode),
                         CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(const char*, cublasGetStatusName, (cublasStatus_t status), (status),
                         "cuBLAS could not be loaded (libcublas.so not found)")
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasSgemm_v2,
                         (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                          int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                          const float* beta, float* C, int ldc),
                         (handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc),
                         CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasSgemmStridedBatched,
                         (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                          int k, const float* alpha, const float* A, int lda, long long int strideA, const float* B,
                          int ldb, long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
                          int batchCount),
                         (handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                          strideC, batchCount),
                         CUBLAS_STATUS_NOT_INITIALIZED)
ATTNSWEEP_CUBLAS_FORWARD(cublasStatus_t, cublasGemmEx,
                         (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                          int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                          cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                          cublasComputeType_t computeType, cublasGemmAlgo_t algo),
                         (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                          computeType, algo),
                         CUBLAS_STATUS_NOT_INITIALIZED)
