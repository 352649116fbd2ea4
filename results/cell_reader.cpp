// Reading cell files with two processes (results/cell_reader.h): file stamps, the CPU
// count, pass 1's forked checksum verifier.
#include "results/cell_reader.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "results/cell_file.h"

namespace attnsweep::aggregation {

bool file_stamp(const std::string& path, int64_t& size, int64_t& mtime_ns, uint64_t* ino) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  size = static_cast<int64_t>(st.st_size);
  mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (ino != nullptr) *ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

int cpu_count() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

[[noreturn]] void verify_ahead(const std::vector<std::string>& files, const std::vector<size_t>& todo,
                               const SharedArray<Verified>& verified, const SharedArray<uint64_t>& passed,
                               int test_reader) {
  int rc = 0;
  try {
    for (const size_t i : todo) {
      if (i < std::atomic_ref<uint64_t>(passed[0]).load(std::memory_order_relaxed)) continue;
      Verified& v = verified[i];
      if (file_stamp(files[i], v.size, v.mtime_ns, &v.ino) && cell_file_damage(files[i]).empty())
        std::atomic_ref<unsigned char>(v.ok).store(1, std::memory_order_release);
      if (test_reader == 2) ::raise(SIGKILL);
    }
  } catch (...) {
    rc = 1;
  }
  ::_exit(rc);
}

}  // namespace attnsweep::aggregation
