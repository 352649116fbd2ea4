// The float32 math of philox_normals (experiments/normals.h), written once for every lane
// type that runs it: the CPU's SSE2, AVX2 and AVX-512 vectors (experiments/normals.cpp), one
// float at a time on the host (NormalsScalar: the tests' reference and nothing faster), and
// one CUDA thread (experiments/icl_prompts.cu, whose float type rounds every operation
// alone). Same operations in the same order on every lane type, each rounded once: the
// same bits everywhere. C++17 and free of x86 headers, so nvcc compiles it for the device.
//
// A lane type L provides U (uint32 lanes), F (float lanes) and four conversions, each exact
// or correctly rounded: from_bits (the float of these bits), to_bits, from_int (the float of
// the lanes' bits read as int32, values below 2^24 here), and sqrt.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define ATTNSWEEP_HD __host__ __device__ __forceinline__
#else
#define ATTNSWEEP_HD [[gnu::always_inline]] inline
#endif

#if !defined(__CUDA_ARCH__)
#ifdef __FAST_MATH__
#error "experiments/normals_math.h must not be compiled with -ffast-math: its results must not depend on the compiler"
#endif
static_assert(__FLT_EVAL_METHOD__ == 0, "float arithmetic must round to float after every operation");
#endif

namespace attnsweep {

// c[0] + c[1] x + ... + c[N-1] x^(N-1). Horner's scheme, the more accurate where the first
// terms dominate, but a dependency chain of 2 N operations:
template <class F, int N>
ATTNSWEEP_HD F horner(const float (&c)[N], const F& x) {
  F p = F{} + c[N - 1];
  for (int i = N - 1; i-- > 0;) p = p * x + c[i];
  return p;
}
// and Estrin's: neighbours paired with x, the pairs with x^2, and so on, a chain of
// 2 log2 N (normals.cpp's scheduling note), for the long polynomial of ln.
template <class F, int N>
ATTNSWEEP_HD F estrin(const float (&c)[N], const F& x) {
  F t[N];
  for (int i = 0; i < N; ++i) t[i] = F{} + c[i];
  F power = x;
  for (int m = N; m > 1; m = (m + 1) / 2) {
    for (int i = 0; i < m / 2; ++i) t[i] = t[2 * i] + power * t[2 * i + 1];
    if (m % 2 == 1) t[m / 2] = t[m - 1];
    power = power * power;
  }
  return t[0];
}

// ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with 9 significant bits so that k kLn2Hi is exact for the
// exponents k here (|k| <= 24): Cephes' split.
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;

// ln x for x in [2^-24, 1]: x = 2^k (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), so that
// ln(1 + f) needs no cancellation, then ln x = k ln 2 + ln(1 + f).
template <class L>
ATTNSWEEP_HD typename L::F log_unit(const typename L::F& x) {
  using U = typename L::U;
  using F = typename L::F;
  // ln(1 + f) = f - f^2/2 + f^3 P(f) on [sqrt(1/2) - 1, sqrt(2) - 1]: fitted for least
  // maximum relative error (Lawson's algorithm in float64), then rounded to float; the
  // errors of the float32 evaluation over every input the generator can produce are
  // measured in tests/unit/test_normals.cpp.
  constexpr float kLogP[9] = {0.333333135f,  -0.250000089f, 0.200021192f,  -0.166679963f, 0.142195523f,
                              -0.124055885f, 0.11888162f,   -0.116756521f, 0.0674664155f};
  // Adding 1 - sqrt(1/2) to the bit pattern makes the exponent field step at sqrt(1/2)
  // instead of at 1; the mantissa plus sqrt(1/2) is then 1 + f.
  constexpr uint32_t kOne = 0x3f800000u, kSqrtHalf = 0x3f3504f3u;
  const U bits = L::to_bits(x) + (kOne - kSqrtHalf);
  const F k = L::from_int((bits >> 23) - 127u);
  const F f = L::from_bits((bits & 0x007fffffu) + kSqrtHalf) - 1.0f;  // exact (Sterbenz)
  const F z = f * f;
  F y = f * z * estrin(kLogP, f);
  y = y + k * kLn2Lo;
  y = y - 0.5f * z;
  return (f + y) + k * kLn2Hi;
}

// sin and cos of 2 pi k 2^-24 for integers k in [0, 2^24). The quadrant q = round(4 k 2^-24)
// and the rest t = k 2^-24 - q / 4 in [-1/8, 1/8] come from integer arithmetic, exactly,
// so no multiple of pi is ever rounded; then q quarter turns: sin and cos swap for odd q,
// and change sign by their sign bits.
template <class L>
ATTNSWEEP_HD void sincos_2pi(const typename L::U& k, typename L::F& sin_out, typename L::F& cos_out) {
  using U = typename L::U;
  using F = typename L::F;
  // sin(2 pi t) = t S(t^2) and cos(2 pi t) = 1 + t^2 C(t^2) on [-1/8, 1/8], fitted as kLogP.
  constexpr float kSinS[4] = {6.28318548f, -41.3416634f, 81.5923538f, -75.3935852f};
  constexpr float kCosC[4] = {-19.7392082f, 64.9393234f, -85.4432373f, 59.2292442f};
  const U q = (k + (1u << 21)) >> 22;
  const F t = L::from_int(k - (q << 22)) * 0x1p-24f;
  const F z = t * t;
  const U s = L::to_bits(t * horner(kSinS, z)), c = L::to_bits(1.0f + z * horner(kCosC, z));
  const U odd = U{} - (q & 1u);  // all ones for odd q
  sin_out = L::from_bits(((s & ~odd) | (c & odd)) ^ ((q & 2u) << 30));
  cos_out = L::from_bits(((c & ~odd) | (s & odd)) ^ (((q + 1u) & 2u) << 30));
}

// Box-Muller's uniforms come from the top 24 bits of a Philox word: u1 = (top24 + 1) 2^-24
// in (0, 1], never 0 (exact in float), and u2 = top24 2^-24 in [0, 1), used as the integer.
template <class U>
ATTNSWEEP_HD U top24(const U& w) {
  return w >> 8;
}
template <class L>
ATTNSWEEP_HD typename L::F unit_open_below(const typename L::U& w) {
  return L::from_int(top24(w) + 1u) * 0x1p-24f;
}

// One Box-Muller pair from two Philox words (w0, w1) or (w2, w3) of a block: r cos and
// r sin of 2 pi u2, r = sqrt(-2 ln u1). Block b's words give outputs 4 b .. 4 b + 3 =
// (w0, w1)'s cos and sin, then (w2, w3)'s (experiments/normals.h).
template <class L>
ATTNSWEEP_HD void box_muller_pair(const typename L::U& w_u1, const typename L::U& w_u2, typename L::F& r_cos,
                                  typename L::F& r_sin) {
  using F = typename L::F;
  const F r = L::sqrt(-2.0f * log_unit<L>(unit_open_below<L>(w_u1)));
  F s, c;
  sincos_2pi<L>(top24(w_u2), s, c);
  r_cos = r * c;
  r_sin = r * s;
}

// Output j (0..3) of a block from its words: which pair, and cos (even j) or sin (odd j).
template <class L>
ATTNSWEEP_HD typename L::F normal_of_block(const typename L::U (&w)[4], int j) {
  typename L::F r_cos, r_sin;
  box_muller_pair<L>(w[j / 2 * 2], w[j / 2 * 2 + 1], r_cos, r_sin);
  return j % 2 == 0 ? r_cos : r_sin;
}

// One float at a time on the host (compiled with -ffp-contract=off, as normals.cpp is).
struct NormalsScalar {
  using U = uint32_t;
  using F = float;
  static float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
  static uint32_t to_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
  }
  static float from_int(uint32_t u) { return static_cast<float>(static_cast<int32_t>(u)); }
  static float sqrt(float x) { return __builtin_sqrtf(x); }
};

}  // namespace attnsweep
