// CUDA optimisers of kernels/ops_cuda.h (AdamW, SGD), and the step graph's clip
// (clip_decision_cuda, scale_by_clip_cuda). CPU side: kernels/cpu/optimizer.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/ops_cuda.h"

#include <cmath>

namespace attnsweep::cuda {
namespace {

// ---- optimizers -----------------------------------------------------------------------------

struct AdamW {
  float* params;
  const float* grads;
  float* m;
  float* v;
  float lr, beta1, beta2, eps, weight_decay;
  double c1, c2;  // bias corrections 1 - beta^t, computed on the host as the CPU does
  __device__ void operator()(int64_t i) const {
    const float g = grads[i];
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const double mhat = mi / c1, vhat = vi / c2;
    const float p = params[i];
    params[i] =
        p - static_cast<float>(static_cast<double>(lr) * (mhat / (sqrt(vhat) + static_cast<double>(eps)) +
                                                          static_cast<double>(weight_decay) * static_cast<double>(p)));
  }
};

// AdamW and SGD of a graphed step: lr, c1, c2 from the step's scalars; no update when
// the step was not finite. The arithmetic of AdamW / Sgd above, line for line.
struct AdamWGraph {
  float* params;
  const float* grads;
  float* m;
  float* v;
  float beta1, beta2, eps, weight_decay;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (!s->finite) return;
    AdamW{params, grads, m, v, s->lr, beta1, beta2, eps, weight_decay, s->c1, s->c2}(i);
  }
};

struct ScaleByClip {
  float* g;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (s->finite && s->coef < 1.0) g[i] *= static_cast<float>(s->coef);
  }
};

__global__ void clip_decision_kernel(CudaStepScalars* s) {
  const double norm = sqrt(s->grad_sq.sum);
  s->finite = isfinite(s->loss.sum) && isfinite(norm);
  s->coef = s->clip > 0 ? s->clip / (norm + 1e-6) : 1.0;
}

struct Sgd {
  float* params;
  const float* grads;
  float* buf;
  float lr, momentum, weight_decay;
  __device__ void operator()(int64_t i) const {
    float g = grads[i] + weight_decay * params[i];
    if (momentum != 0.0f) {
      buf[i] = momentum * buf[i] + g;
      g = buf[i];
    }
    params[i] -= lr * g;
  }
};

struct SgdGraph {
  float* params;
  const float* grads;
  float* buf;
  float momentum, weight_decay;
  const CudaStepScalars* s;
  __device__ void operator()(int64_t i) const {
    if (!s->finite) return;
    Sgd{params, grads, buf, s->lr, momentum, weight_decay}(i);
  }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- optimizers ---------------------------------------------------------------------------------------

void adamw_bias_corrections(float beta1, float beta2, int64_t t, double* c1, double* c2) {
  *c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  *c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
}

void clip_decision_cuda(CudaStepScalars* s, cudaStream_t stream) {
  ATTN_LAUNCH(1, 1, 0, stream, clip_decision_kernel)(s);
  ATTN_CUDA_CHECK_LAUNCH();
}

void scale_by_clip_cuda(float* g, int64_t n, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(ScaleByClip{g, s}, n, stream);
}

void adamw_update_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                       float beta2, float eps, float weight_decay, int64_t t, cudaStream_t stream) {
  double c1 = 0, c2 = 0;
  adamw_bias_corrections(beta1, beta2, t, &c1, &c2);
  launch_map(AdamW{params, grads, m, v, lr, beta1, beta2, eps, weight_decay, c1, c2}, n, stream);
}

void adamw_update_graph_cuda(float* params, const float* grads, float* m, float* v, int64_t n, float beta1, float beta2,
                             float eps, float weight_decay, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(AdamWGraph{params, grads, m, v, beta1, beta2, eps, weight_decay, s}, n, stream);
}

void sgd_update_graph_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float momentum,
                           float weight_decay, const CudaStepScalars* s, cudaStream_t stream) {
  launch_map(SgdGraph{params, grads, momentum_buf, momentum, weight_decay, s}, n, stream);
}

void sgd_update_cuda(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                     float weight_decay, cudaStream_t stream) {
  launch_map(Sgd{params, grads, momentum_buf, lr, momentum, weight_decay}, n, stream);
}

}  // namespace attnsweep
