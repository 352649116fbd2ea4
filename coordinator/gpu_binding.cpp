#include "coordinator/gpu_binding.h"
#include "base/options.h"

#include <cstdlib>
#include <stdexcept>

namespace attnsweep {

LocalRank local_rank_from_env() {
  static const options::ForeignName kPairs[][2] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                                   {"PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"},
                                                   {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}};
  for (const auto& p : kPairs) {
    const int r = options::launcher_env_int(p[0], 0), n = options::launcher_env_int(p[1], 1);
    if (r < 0 || n < 0) continue;
    if (r >= n)
      throw std::runtime_error(std::string("environment variables ") + p[0].name + "=" + std::to_string(r) + " and " +
                               p[1].name + "=" + std::to_string(n) + ": expected the local rank below the local size");
    return {r, n, std::string(p[0].name) + ", " + p[1].name};
  }
  return {};
}

std::vector<int> node_gpus(int ngpu, const LocalRank& local) {
  std::vector<int> out;
  const options::GpuBind bind = options::gpu_bind();  // a bad value is an error on every rank
  const bool all = local.size <= 1 || bind == options::GpuBind::none;
  if (ngpu <= 0) return out;
  if (all) {
    for (int g = 0; g < ngpu; ++g) out.push_back(g);
    return out;
  }
  const long g = ngpu, l = local.size, r = local.rank;
  if (g >= l) {
    for (long k = r * g / l; k < (r + 1) * g / l; ++k) out.push_back(static_cast<int>(k));
  } else {
    out.push_back(static_cast<int>(r * g / l));
  }
  return out;
}

int planned_gpu_count(int real, bool* faked) {
  *faked = false;
  if (real > 0) return real;
  const int n = options::fake_gpu_count();
  if (n <= 0) return real;
  *faked = true;
  return n;
}

}  // namespace attnsweep
