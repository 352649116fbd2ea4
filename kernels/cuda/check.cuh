// The error checks of every CUDA call and launch: a failed call throws
// std::runtime_error naming the call, its file and line (kernels/cuda/check.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace attnsweep::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line);

#define ATTN_CUDA_CHECK(call)                                                                                \
  do {                                                                                                       \
    const cudaError_t attn_err_ = (call);                                                                    \
    if (attn_err_ != cudaSuccess) ::attnsweep::cuda::throw_cuda_error(attn_err_, #call, __FILE__, __LINE__); \
  } while (0)
#define ATTN_CUBLAS_CHECK(call)                                                                                        \
  do {                                                                                                                 \
    const cublasStatus_t attn_st_ = (call);                                                                            \
    if (attn_st_ != CUBLAS_STATUS_SUCCESS) ::attnsweep::cuda::throw_cublas_error(attn_st_, #call, __FILE__, __LINE__); \
  } while (0)
// After a kernel launch: configuration errors surface here, not at the next call.
#define ATTN_CUDA_CHECK_LAUNCH() ATTN_CUDA_CHECK(cudaGetLastError())

}  // namespace attnsweep::cuda
