#include "kernels/cuda/check.cuh"

#include <stdexcept>
#include <string>

namespace attnsweep::cuda {

void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                           ") in " + call + " at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t st, const char* call, const char* file, int line) {
  throw std::runtime_error(std::string("cuBLAS error ") + cublasGetStatusName(st) + " in " + call + " at " + file +
                           ":" + std::to_string(line));
}

}  // namespace attnsweep::cuda
