#include "base/cpu_env.h"
#include "base/options.h"

#include <cstdlib>
#include <cstring>

extern "C" char* openblas_get_corename(void);

namespace attnsweep {

std::vector<std::pair<std::string, std::string>> cpu_env_fixes(bool oversubscribed) {
  std::vector<std::pair<std::string, std::string>> fixes;
  if (options::launcher_env("OMP_WAIT_POLICY") == nullptr && options::launcher_env("GOMP_SPINCOUNT") == nullptr) {
    if (oversubscribed)
      fixes.emplace_back("OMP_WAIT_POLICY", "passive");
    else
      fixes.emplace_back("GOMP_SPINCOUNT", "10000");
  }
  if (options::launcher_env("OPENBLAS_CORETYPE") == nullptr) {
    const char* core = openblas_get_corename();
    // Generic fall-backs of the probe; a core it did recognise is kept.
    const bool generic = core != nullptr && (std::strcmp(core, "Prescott") == 0 || std::strcmp(core, "Core2") == 0 ||
                                             std::strcmp(core, "Nehalem") == 0 || std::strcmp(core, "Penryn") == 0);
#if defined(__x86_64__)
    if (generic) {
      __builtin_cpu_init();
      if (__builtin_cpu_supports("avx512f"))
        fixes.emplace_back("OPENBLAS_CORETYPE", "SkylakeX");
      else if (__builtin_cpu_supports("avx2"))
        fixes.emplace_back("OPENBLAS_CORETYPE", "Haswell");
    }
#else
    (void)generic;
#endif
  }
  return fixes;
}

}  // namespace attnsweep
