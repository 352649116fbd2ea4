// Small numerical helpers of the CPU kernels that must vectorise inside `omp simd` loops.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnsweep::cpu {

// exp(x) in float32, branch-free so that GCC vectorises it (glibc's expf only vectorises
// under -ffast-math). Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, then a degree-6
// Taylor polynomial of e^r (truncation < 1.2e-7 relative) and 2^k from the exponent bits:
// about 2 ulp. exp(x) = 0 for x < -87.33 (below FLT_MIN), saturates near 2^127*1.4 above.
// 8 floats in GCC's vector extension: AVX in an avx2 function, two SSE halves elsewhere.
// Passed by reference only (GCC's -Wpsabi: by value, the AVX and the default clone of a
// caller would pass it differently).
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

// 2^k for an integral kf, from the exponent bits.
[[gnu::always_inline]] inline void pow2_of(const float& kf, float& out) {
  const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
  std::memcpy(&out, &bits, sizeof out);
}
[[gnu::always_inline]] inline void pow2_of(const f32x8& kf, f32x8& out) {
  const i32x8 bits = (__builtin_convertvector(kf, i32x8) + 127) << 23;
  out = reinterpret_cast<f32x8>(bits);
}

// x = fast_expf(x) for a float or, lane by lane with the same operations, an f32x8.
template <class F>
[[gnu::always_inline]] inline void fast_exp_inplace(F& x) {
  const F lo = F{} - 87.33f, hi = F{} + 88.37f;
  const F xc = x < lo ? lo : (x > hi ? hi : x);
  const F shifter = F{} + 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F kf = (xc * 1.44269504088896341f + shifter) - shifter;
  const F r = (xc - kf * 0.693145751953125f) - kf * 1.428606765330187045e-06f;
  F p = F{} + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  F scale;
  pow2_of(kf, scale);
  x = x < lo ? F{} : p * scale;
}

inline float fast_expf(float x) {
  fast_exp_inplace(x);
  return x;
}

}  // namespace attnsweep::cpu
