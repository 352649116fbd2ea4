// CPU pooling over tokens of kernels/ops.h (meanpool_forward, meanpool_backward). CUDA
// side: kernels/cuda/pooling.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

namespace attnsweep {

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

}  // namespace attnsweep
