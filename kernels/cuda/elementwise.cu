// CUDA element-wise ops of kernels/ops_cuda.h: GELU and the residual add, forward and
// backward. CPU side: kernels/cpu/elementwise.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

#include <cmath>

namespace attnsweep::cuda {
namespace {

// ---- GELU -----------------------------------------------------------------------------

constexpr float kGeluK = 0.7978845608028654f;  // sqrt(2/pi)

struct GeluForward {
  float* out;
  const float* inp;
  __device__ void operator()(int64_t i) const {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluK * (x + 0.044715f * x * x * x)));
  }
};

struct GeluBackward {
  float* dinp;
  const float* inp;
  const float* dout;
  __device__ void operator()(int64_t i) const {
    const float x = inp[i];
    const float th = tanhf(kGeluK * (x + 0.044715f * x * x * x));
    const float sech2 = 1.0f - th * th;
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) du/dx
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluK * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] += grad * dout[i];
  }
};

// ---- residual, mean-pool --------------------------------------------------------------

struct ResidualForward {
  float* out;
  const float* a;
  const float* b;
  __device__ void operator()(int64_t i) const { out[i] = a[i] + b[i]; }
};

struct ResidualBackward {
  float* d1;
  float* d2;
  const float* dout;
  __device__ void operator()(int64_t i) const {
    d1[i] += dout[i];
    d2[i] += dout[i];
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- element-wise ops -------------------------------------------------------------------------

void gelu_forward_cuda(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  launch_map(GeluForward{out, inp}, n, stream);
}
void gelu_backward_cuda(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t stream) {
  launch_map(GeluBackward{dinp, inp, dout}, n, stream);
}
void residual_forward_cuda(float* out, const float* inp1, const float* inp2, int64_t n, cudaStream_t stream) {
  launch_map(ResidualForward{out, inp1, inp2}, n, stream);
}
void residual_backward_cuda(float* dinp1, float* dinp2, const float* dout, int64_t n, cudaStream_t stream) {
  launch_map(ResidualBackward{dinp1, dinp2, dout}, n, stream);
}

}  // namespace attnsweep
