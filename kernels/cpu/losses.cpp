// CPU losses of kernels/ops.h: softmax cross-entropy and MSE, forward (a host value)
// and backward. CUDA side: kernels/cuda/losses.cu.
#pragma GCC optimize("no-trapping-math")  // kernels/cpu/ops_common.h: before the headers
#include "kernels/ops.h"

#include <cmath>
#include <vector>

namespace attnsweep {

// ---- softmax cross-entropy ------------------------------------------------------------

double softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                    int64_t N, int64_t V) {
  double loss = 0.0;
  int64_t correct = 0;
  // Rows in parallel; the loss sum and the count in row order (reduction over a fixed
  // static partition would depend on the thread count).
  std::vector<double> row_loss(static_cast<size_t>(N));
  std::vector<char> row_ok(static_cast<size_t>(N));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float* x = logits + i * V;
    int64_t arg = 0;
    for (int64_t j = 1; j < V; ++j)
      if (x[j] > x[arg]) arg = j;
    const double mx = x[arg];
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(x[j] - mx);
    for (int64_t j = 0; j < V; ++j) probs[i * V + j] = static_cast<float>(std::exp(x[j] - mx) / z);
    row_loss[static_cast<size_t>(i)] = -(x[targets[i]] - mx - std::log(z));  // -log softmax, stable
    row_ok[static_cast<size_t>(i)] = arg == targets[i];
  }
  for (int64_t i = 0; i < N; ++i) {
    loss += row_loss[static_cast<size_t>(i)];
    correct += row_ok[static_cast<size_t>(i)];
  }
  if (n_correct != nullptr) *n_correct = correct;
  return N > 0 ? loss / static_cast<double>(N) : 0.0;
}

void softmax_crossentropy_backward(float* dlogits, const float* probs, const int32_t* targets, float dloss, int64_t N,
                                   int64_t V) {
  const float s = dloss / static_cast<float>(N);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < V; ++j) dlogits[i * V + j] += s * (probs[i * V + j] - (j == targets[i] ? 1.0f : 0.0f));
}

// ---- MSE --------------------------------------------------------------------------------

double mse_forward(const float* pred, const float* target, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(pred[i]) - target[i];
    s += e * e;
  }
  return n > 0 ? s / static_cast<double>(n) : 0.0;
}

void mse_backward(float* dpred, const float* pred, const float* target, float dloss, int64_t n) {
  const float s = 2.0f * dloss / static_cast<float>(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) dpred[i] += s * (pred[i] - target[i]);
}

}  // namespace attnsweep
