#include "coordinator/gpu_binding.h"

#include <cstdlib>
#include <stdexcept>

namespace attnsweep {

namespace {

// The value of `name` as a whole number >= lo, or -1 when unset.
int env_int(const char* name, int lo) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < lo || n > 1'000'000)
    throw std::runtime_error(std::string("environment variable ") + name + "=" + v +
                             ": expected a whole number >= " + std::to_string(lo));
  return static_cast<int>(n);
}

}  // namespace

LocalRank local_rank_from_env() {
  static const char* const kPairs[][2] = {{"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                          {"PMIX_LOCAL_RANK", "PMIX_LOCAL_SIZE"},
                                          {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}};
  for (const auto& p : kPairs) {
    const int r = env_int(p[0], 0), n = env_int(p[1], 1);
    if (r < 0 || n < 0) continue;
    if (r >= n)
      throw std::runtime_error(std::string("environment variables ") + p[0] + "=" + std::to_string(r) + " and " + p[1] +
                               "=" + std::to_string(n) + ": expected the local rank below the local size");
    return {r, n, std::string(p[0]) + ", " + p[1]};
  }
  return {};
}

std::vector<int> node_gpus(int ngpu, const LocalRank& local) {
  std::vector<int> out;
  const char* bind = std::getenv("ATTNSWEEP_GPU_BIND");
  if (bind != nullptr && std::string(bind) != "none" && std::string(bind) != "local")
    throw std::runtime_error(std::string("environment variable ATTNSWEEP_GPU_BIND=") + bind +
                             ": expected local (the default: share out the node's GPUs by local rank) or none");
  const bool all = local.size <= 1 || (bind != nullptr && std::string(bind) == "none");
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
  const int n = env_int("ATTNSWEEP_FAKE_GPU_COUNT", 0);
  if (n <= 0) return real;
  *faked = true;
  return n;
}

}  // namespace attnsweep
