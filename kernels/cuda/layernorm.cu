// CUDA LayerNorm of kernels/ops_cuda.h (layernorm_forward_cuda, layernorm_backward_cuda).
// CPU side: kernels/cpu/layernorm.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

namespace attnsweep::cuda {
namespace {

// ---- layernorm ------------------------------------------------------------------------

constexpr double kLayernormEps = 1e-5;

__global__ void __launch_bounds__(kThreads)
    layernorm_forward_kernel(float* __restrict__ out, float* __restrict__ mean, float* __restrict__ rstd,
                             const float* __restrict__ inp, const float* __restrict__ weight,
                             const float* __restrict__ bias, int64_t N, int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;  // whole warp
  const float* x = inp + i * C;
  double m = 0.0;
  for (int64_t c = lane; c < C; c += 32) m += x[c];
  m = warp_sum(m) / static_cast<double>(C);
  double var = 0.0;  // biased variance, as PyTorch's LayerNorm
  for (int64_t c = lane; c < C; c += 32) var += (x[c] - m) * (x[c] - m);
  var = warp_sum(var) / static_cast<double>(C);
  const double r = 1.0 / sqrt(var + kLayernormEps);
  float* o = out + i * C;
  for (int64_t c = lane; c < C; c += 32) o[c] = static_cast<float>((x[c] - m) * r) * weight[c] + bias[c];
  if (lane == 0) {
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(r);
  }
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dout * weight.
__global__ void __launch_bounds__(kThreads)
    layernorm_backward_dinp_kernel(float* __restrict__ dinp, const float* __restrict__ dout,
                                   const float* __restrict__ inp, const float* __restrict__ weight,
                                   const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N,
                                   int64_t C) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;
  const float* x = inp + i * C;
  const float* dy = dout + i * C;
  const float mi = mean[i];
  const double ri = rstd[i];
  double s1 = 0.0, s2 = 0.0;
  for (int64_t c = lane; c < C; c += 32) {
    const double xhat = (x[c] - mi) * ri;
    const double dxhat = static_cast<double>(dy[c]) * weight[c];
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  s1 = warp_sum(s1) / static_cast<double>(C);
  s2 = warp_sum(s2) / static_cast<double>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const double xhat = (x[c] - mi) * ri;
    const double dxhat = static_cast<double>(dy[c]) * weight[c];
    dinp[i * C + c] += static_cast<float>(ri * (dxhat - s1 - xhat * s2));
  }
}

struct LayernormParamGrads {  // f(i, c) = (dout * xhat, dout)
  const float* dout;
  const float* inp;
  const float* mean;
  const float* rstd;
  int64_t C;
  __device__ void operator()(int64_t i, int64_t c, double* v) const {
    const double xhat = (inp[i * C + c] - mean[i]) * static_cast<double>(rstd[i]);
    v[0] = dout[i * C + c] * xhat;
    v[1] = dout[i * C + c];
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- layernorm ------------------------------------------------------------------------------

void layernorm_forward_cuda(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int64_t N, int64_t C, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, layernorm_forward_kernel)(out, mean, rstd, inp, weight, bias, N, C);
  ATTN_CUDA_CHECK_LAUNCH();
}

void layernorm_backward_cuda(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int64_t N, int64_t C,
                             AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || C <= 0) return;
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, layernorm_backward_dinp_kernel)
  (dinp, dout, inp, weight, mean, rstd, N, C);
  ATTN_CUDA_CHECK_LAUNCH();
  launch_colsum<2>(LayernormParamGrads{dout, inp, mean, rstd, C}, N, C, Dsts<2>{{dweight, dbias}}, ws, stream);
}

}  // namespace attnsweep
