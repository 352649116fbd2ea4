// The grid-stride map launcher shared by the element-wise CUDA ops (ops.cu, model_ops.cu).
#pragma once

#include "kernels/cuda/check.cuh"
#include "kernels/cuda/device.cuh"

#include <algorithm>
#include <cstdint>

namespace attnsweep::cuda {

constexpr int kMapThreads = 256;

// Grid of a grid-stride loop over n elements (at least one block).
inline unsigned map_blocks(int64_t n) {
  const int64_t blocks = (n + kMapThreads - 1) / kMapThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, 65536));
}

// out-of-line functor map: f(i) for i in [0, n), grid-stride.
template <class F>
__global__ void __launch_bounds__(kMapThreads) map_kernel(F f, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    f(i);
}

template <class F>
void launch_map(const F& f, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  ATTN_LAUNCH(map_blocks(n), kMapThreads, 0, stream, map_kernel<F>)(f, n);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace attnsweep::cuda
