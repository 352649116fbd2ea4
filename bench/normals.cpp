// Throughput of philox_normals (experiments/normals.h) on one thread, on each path,
// against numpy's Generator.standard_normal (float32 and float64, timed by /usr/bin/python3
// in the same run, into a preallocated array as ours) and against one thread's memory
// bandwidth: memset (a write of the same bytes, what our output costs at the least) and
// memcpy (GB/s of bytes copied). Every rate is the best of 5 passes, by wall time and by the
// thread's CPU time (the second less sensitive to other processes on a shared machine).
// usage: normals [N]   (N normals per pass, default 2^24 = 64 MiB of float32)
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "experiments/normals.h"

namespace {

struct Rate {
  double wall = 0, cpu = 0;  // items per second
};

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Best of 5 passes of pass(p), each doing `items` items.
template <class Pass>
Rate best_rate(double items, Pass pass) {
  Rate best;
  for (int p = 0; p < 5; ++p) {
    const double c0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    pass(p);
    asm volatile("" : : : "memory");  // the pass's stores happen before the clock is read
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best.wall = std::max(best.wall, items / wall);
    best.cpu = std::max(best.cpu, items / (cpu_seconds() - c0));
  }
  return best;
}

// numpy's rates (M normals/s, wall and CPU) for float32 and float64, or false without numpy.
bool numpy_rates(int64_t n, Rate& f32, Rate& f64) {
  const std::string script =
      "import time, numpy as np\n"
      "g = np.random.default_rng(0)\n"
      "for dt in (np.float32, np.float64):\n"
      "    out = np.empty(" +
      std::to_string(n) +
      ", dt)\n"
      "    g.standard_normal(out=out, dtype=dt)\n"
      "    w = c = 0.0\n"
      "    for _ in range(5):\n"
      "        c0, t0 = time.thread_time(), time.perf_counter()\n"
      "        g.standard_normal(out=out, dtype=dt)\n"
      "        w = max(w, out.size / (time.perf_counter() - t0))\n"
      "        c = max(c, out.size / (time.thread_time() - c0))\n"
      "    print(w, c)\n";
  FILE* p = popen(("/usr/bin/python3 -c '" + script + "' 2>/dev/null").c_str(), "r");
  if (!p) return false;
  const bool ok = std::fscanf(p, "%lf %lf %lf %lf", &f32.wall, &f32.cpu, &f64.wall, &f64.cpu) == 4;
  return pclose(p) == 0 && ok;
}

void print_rate(const char* what, Rate r, double bytes_per_item) {
  std::printf("%-22s %10.1f %10.1f %10.2f\n", what, r.wall / 1e6, r.cpu / 1e6, r.wall * bytes_per_item / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  using attnsweep::NormalsPath;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{1} << 24;
  if (n < 1) {
    std::fprintf(stderr, "usage: normals [N >= 1]\n");
    return 2;
  }
  std::vector<float> out(static_cast<size_t>(n), 1.0f), src(static_cast<size_t>(n), 2.0f);  // touched: no page faults
  const double bytes = 4.0 * static_cast<double>(n);
  std::printf("normals: N = %lld float32 (%.1f MiB) per pass, one thread, best of 5\n", static_cast<long long>(n),
              bytes / (1 << 20));
  std::printf("%-22s %10s %10s %10s\n", "", "M/s wall", "M/s CPU", "GB/s wall");

  const NormalsPath paths[3] = {NormalsPath::kAvx512, NormalsPath::kAvx2, NormalsPath::kSse2};
  Rate ours[3];
  for (int i = 0; i < 3; ++i) {
    const std::string name = std::string("philox_normals ") + attnsweep::normals_path_name(paths[i]);
    if (!attnsweep::normals_path_supported(paths[i])) {
      std::printf("%-22s (not on this CPU)\n", name.c_str());
      continue;
    }
    ours[i] = best_rate(static_cast<double>(n), [&](int p) {
      attnsweep::philox_normals_path(paths[i], 0x1234 + static_cast<uint64_t>(p), 7, out.data(), n);
    });
    print_rate(name.c_str(), ours[i], 4);
  }
  Rate np32, np64;
  const bool have_numpy = numpy_rates(n, np32, np64);
  if (have_numpy) {
    print_rate("numpy float32", np32, 4);
    print_rate("numpy float64", np64, 8);
  } else {
    std::printf("numpy: /usr/bin/python3 with numpy not found\n");
  }
  // Bytes per second, reported as M floats per second like the rest.
  const Rate set =
      best_rate(static_cast<double>(n), [&](int p) { std::memset(out.data(), p, static_cast<size_t>(bytes)); });
  const Rate copy =
      best_rate(static_cast<double>(n), [&](int) { std::memcpy(out.data(), src.data(), static_cast<size_t>(bytes)); });
  print_rate("memset (floats)", set, 4);
  print_rate("memcpy (floats)", copy, 4);

  const NormalsPath best_path = attnsweep::normals_best_path();
  const Rate best = ours[best_path == NormalsPath::kAvx512 ? 0 : best_path == NormalsPath::kAvx2 ? 1 : 2];
  std::printf("\nours (%s, philox_normals' path here) / numpy float32: %.1fx wall, %.1fx CPU",
              attnsweep::normals_path_name(best_path), have_numpy ? best.wall / np32.wall : 0.0,
              have_numpy ? best.cpu / np32.cpu : 0.0);
  std::printf("; / numpy float64: %.1fx wall\n", have_numpy ? best.wall / np64.wall : 0.0);
  std::printf("ours bytes/s / memset's: %.3f (wall); avx512 / avx2: %.2fx; avx2 / sse2: %.2fx\n", best.wall / set.wall,
              ours[1].wall > 0 ? ours[0].wall / ours[1].wall : 0.0,
              ours[2].wall > 0 ? ours[1].wall / ours[2].wall : 0.0);
  return 0;
}
