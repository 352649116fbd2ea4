// CpuBackend (worker/backend.h): the all-reduce of CPU data-parallel replicas.
#include "worker/backend.h"

namespace attnsweep {

void CpuBackend::Collective::allreduce_mean(const std::vector<float*>& grads, int64_t n) {
  const int64_t k = static_cast<int64_t>(grads.size());
  float* out = grads[0];
  const double inv_k = 1.0 / static_cast<double>(k);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t r = 0; r < k; ++r) s += static_cast<double>(grads[static_cast<size_t>(r)][i]);
    out[i] = static_cast<float>(s * inv_k);
  }
}

}  // namespace attnsweep
