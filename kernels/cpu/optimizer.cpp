// CPU optimisers of kernels/ops.h (adamw_update, sgd_update). CUDA side:
// kernels/cuda/optimizer.cu. Compiled with -fno-math-errno (kernels/CMakeLists.txt): see
// adamw_span.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

#include "kernels/cpu/ops_common.h"

#include <algorithm>
#include <cmath>

namespace attnsweep {

// ---- optimizers -------------------------------------------------------------------------

namespace {
// The update of n parameters (float64 arithmetic for the bias-corrected step): a
// target_clones span, so that the float64 divide and square root run 8 lanes wide where
// the CPU has AVX-512 (scalar, AdamW was 1.2 % of a training step). It vectorises only
// without math-errno (a sqrt that may set errno is a branch in the loop; the pragma form
// of the flag does not reach the builtin), hence -fno-math-errno on this file.
OPS_ROW_CLONES void adamw_span(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1,
                               float beta2, float eps, float weight_decay, double c1, double c2) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    m[i] = beta1 * m[i] + (1.0f - beta1) * g;
    v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
    const double mhat = m[i] / c1, vhat = v[i] / c2;
    params[i] -=
        static_cast<float>(lr * (mhat / (std::sqrt(vhat) + eps) + weight_decay * static_cast<double>(params[i])));
  }
}
constexpr int64_t kAdamBlock = 4096;  // parameters per parallel work item
}  // namespace

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t t) {
  const double c1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double c2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  const int64_t nb = (n + kAdamBlock - 1) / kAdamBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t i0 = b * kAdamBlock;
    adamw_span(params + i0, grads + i0, m + i0, v + i0, std::min(kAdamBlock, n - i0), lr, beta1, beta2, eps,
               weight_decay, c1, c2);
  }
}

void sgd_update(float* params, const float* grads, float* momentum_buf, int64_t n, float lr, float momentum,
                float weight_decay) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] + weight_decay * params[i];
    if (momentum != 0.0f) {
      momentum_buf[i] = momentum * momentum_buf[i] + g;
      g = momentum_buf[i];
    }
    params[i] -= lr * g;
  }
}

}  // namespace attnsweep
