// CUDA pooling over tokens of kernels/ops_cuda.h (meanpool_forward_cuda,
// meanpool_backward_cuda). CPU side: kernels/cpu/pooling.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

namespace attnsweep::cuda {
namespace {

// ---- mean-pool ---------------------------------------------------------------------------

struct MeanpoolForward {  // one thread per (b, c), tokens summed in order in float64
  float* out;
  const float* inp;
  int64_t T, C;
  __device__ void operator()(int64_t bc) const {
    const int64_t b = bc / C, c = bc % C;
    double s = 0.0;
    for (int64_t t = 0; t < T; ++t) s += inp[(b * T + t) * C + c];
    out[bc] = static_cast<float>(s / static_cast<double>(T));
  }
};

struct MeanpoolBackward {
  float* dinp;
  const float* dout;
  int64_t T, C;
  float inv;
  __device__ void operator()(int64_t i) const {
    const int64_t c = i % C, b = i / (T * C);
    dinp[i] += dout[b * C + c] * inv;
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

void meanpool_forward_cuda(float* out, const float* inp, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  if (T <= 0) return;
  launch_map(MeanpoolForward{out, inp, T, C}, B * C, stream);
}
void meanpool_backward_cuda(float* dinp, const float* dout, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  if (T <= 0 || C <= 0) return;
  launch_map(MeanpoolBackward{dinp, dout, T, C, 1.0f / static_cast<float>(T)}, B * T * C, stream);
}

}  // namespace attnsweep
