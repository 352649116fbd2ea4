// The physical peak the CPU benchmarks are held against (bench/run): float32 FMA
// throughput of THREADS threads, each running 16 independent FMA chains (enough to hide
// the FMA latency on two ports) in the widest vectors the CPU has (AVX-512, else AVX2 with
// FMA), best of 5 timings of about 0.2 s. Prints one CSV line:
//   fma_peak,<threads>,<avx512|avx2>,<GFLOP/s>
// usage: fma_peak [THREADS]   (default 2)
#include <omp.h>

// GCC 12 warns inside the AVX-512 headers (their _mm512_undefined_* self-initialisation)
// when these intrinsics are inlined into target("avx512f") functions: a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kChains = 16;

__attribute__((target("avx512f"))) float chains512(long n) {
  __m512 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm512_set1_ps(1e-3f * static_cast<float>(i));
  const __m512 b = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(1e-4f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  float s = 0.0f;
  for (int i = 0; i < kChains; ++i) s += _mm512_reduce_add_ps(a[i]);
  return s;
}

__attribute__((target("avx2,fma"))) float chains256(long n) {
  __m256 a[kChains];
  for (int i = 0; i < kChains; ++i) a[i] = _mm256_set1_ps(1e-3f * static_cast<float>(i));
  const __m256 b = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(1e-4f);
  for (long k = 0; k < n; ++k) {
#pragma GCC unroll 16
    for (int i = 0; i < kChains; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  alignas(32) float t[8];
  float s = 0.0f;
  for (int i = 0; i < kChains; ++i) {
    _mm256_store_ps(t, a[i]);
    for (float v : t) s += v;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) {
    std::fprintf(stderr, "fma_peak: this CPU has neither AVX-512 nor AVX2 with FMA\n");
    return 1;
  }
  const int lanes = avx512 ? 16 : 8;
  float sink = 0.0f;  // the chains' results, printed so that none is optimised away
  auto timed = [&](long n) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      const float s = avx512 ? chains512(n) : chains256(n);
#pragma omp atomic
      sink += s;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  long n = 1 << 20;
  while (timed(n) < 0.05) n *= 2;  // about 0.2 s a timing below
  n *= 4;
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) best = std::min(best, timed(n));
  const double flops = 2.0 * lanes * kChains * static_cast<double>(n) * threads;
  std::printf("fma_peak,%d,%s,%.1f\n", threads, avx512 ? "avx512" : "avx2", flops / best * 1e-9);
  std::fprintf(stderr, "fma_peak: checksum %g\n", static_cast<double>(sink));
  return 0;
}
