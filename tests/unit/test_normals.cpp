// experiments/philox.h and experiments/normals.h:
// - Philox4x32-10, scalar and 4 / 8 / 16 lanes, against Random123's published known answers and
//   against Random123's philox4x32 itself (when librandom123-dev is installed) on random
//   counters and keys;
// - philox_normals: the AVX-512, AVX2 and SSE2 paths bit for bit, at lengths around every
//   tail (chunks of 256, 128 and 64 outputs), and one float at a time (a CUDA thread's
//   form); guard elements after the output; prefixes;
// - its definition: each output against float64 Box-Muller of the same Philox words;
// - its float32 functions (ln, sin and cos of 2 pi u) against float64 over every input the
//   generator can give them (2^24 each): the largest errors, in ulp, stated and asserted;
// - the law: moments, tail fractions and the CDF of 4M normals, and (auto)correlations.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "experiments/normals.h"
#include "experiments/normals_math.h"
#include "experiments/philox.h"

#if __has_include(<Random123/philox.h>)
#include <Random123/philox.h>
#define ATTNSWEEP_HAVE_RANDOM123 1
#endif

namespace attnsweep {
namespace {

using Ctr = std::array<uint32_t, 4>;
using Key = std::array<uint32_t, 2>;

// The 4- and 8-lane forms on counters ctr[j] (lane j) under one key, each compiled for its
// instruction set as philox_normals compiles them.
void philox_x4(const Ctr* ctr, Key key, Ctr* out) {
  std::array<u32x4, 4> c;
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 4; ++j) c[w][j] = ctr[j][w];
  const std::array<u32x4, 4> r = philox4x32_10(c, key);
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 4; ++j) out[j][w] = r[w][j];
}
__attribute__((target("avx2"))) void philox_x8(const Ctr* ctr, Key key, Ctr* out) {
  std::array<u32x8, 4> c;
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 8; ++j) c[w][j] = ctr[j][w];
  const std::array<u32x8, 4> r = philox4x32_10(c, key);
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 8; ++j) out[j][w] = r[w][j];
}

__attribute__((target("avx512f"))) void philox_x16(const Ctr* ctr, Key key, Ctr* out) {
  std::array<u32x16, 4> c;
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 16; ++j) c[w][j] = ctr[j][w];
  const std::array<u32x16, 4> r = philox4x32_10(c, key);
  for (int w = 0; w < 4; ++w)
    for (int j = 0; j < 16; ++j) out[j][w] = r[w][j];
}

bool have_avx2() {
  return normals_path_supported(NormalsPath::kAvx2);
}
bool have_avx512() {
  return normals_path_supported(NormalsPath::kAvx512);
}

// Random123's kat_vectors for philox4x32 with 10 rounds.
TEST(Philox, KnownAnswers) {
  const struct {
    Ctr ctr;
    Key key;
    Ctr out;
  } kat[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const auto& k : kat) {
    EXPECT_EQ(philox4x32_10(k.ctr, k.key), k.out);
    Ctr same[16], out[16];
    std::fill(std::begin(same), std::end(same), k.ctr);
    philox_x4(same, k.key, out);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out[j], k.out) << "4 lanes, lane " << j;
    if (have_avx2()) {
      philox_x8(same, k.key, out);
      for (int j = 0; j < 8; ++j) EXPECT_EQ(out[j], k.out) << "8 lanes, lane " << j;
    }
    if (have_avx512()) {
      philox_x16(same, k.key, out);
      for (int j = 0; j < 16; ++j) EXPECT_EQ(out[j], k.out) << "16 lanes, lane " << j;
    }
  }
}

TEST(Philox, MatchesRandom123OnRandomCounters) {
#ifndef ATTNSWEEP_HAVE_RANDOM123
  GTEST_SKIP() << "librandom123-dev is not installed";
#else
  std::mt19937 rng(20240601);
  const auto draw = [&rng] { return static_cast<uint32_t>(rng()); };
  const auto random123 = [](const Ctr& c, const Key& k) {
    const philox4x32_ctr_t ctr = {{c[0], c[1], c[2], c[3]}};
    const philox4x32_key_t key = {{k[0], k[1]}};
    const philox4x32_ctr_t r = philox4x32(ctr, key);
    return Ctr{r.v[0], r.v[1], r.v[2], r.v[3]};
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const Key key = {draw(), draw()};
    Ctr ctr[16], want[16], got[16];
    for (Ctr& c : ctr) c = {draw(), draw(), draw(), draw()};
    for (int j = 0; j < 16; ++j) want[j] = random123(ctr[j], key);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(philox4x32_10(ctr[j], key), want[j]) << "scalar, trial " << trial;
    philox_x4(ctr, key, got);
    for (int j = 0; j < 4; ++j) ASSERT_EQ(got[j], want[j]) << "4 lanes, trial " << trial << " lane " << j;
    if (have_avx2()) {
      philox_x8(ctr, key, got);
      for (int j = 0; j < 8; ++j) ASSERT_EQ(got[j], want[j]) << "8 lanes, trial " << trial << " lane " << j;
    }
    if (have_avx512()) {
      philox_x16(ctr, key, got);
      for (int j = 0; j < 16; ++j) ASSERT_EQ(got[j], want[j]) << "16 lanes, trial " << trial << " lane " << j;
    }
  }
#endif
}

constexpr int64_t kGuard = 37;  // guard elements after each output
constexpr float kGuardValue = -12345.5f;

// philox_normals_path into a buffer with guards after it, which must stay untouched.
std::vector<float> normals(NormalsPath path, uint64_t key, uint64_t stream, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n + kGuard), kGuardValue);
  philox_normals_path(path, key, stream, out.data(), n);
  for (int64_t i = n; i < n + kGuard; ++i)
    EXPECT_EQ(out[static_cast<size_t>(i)], kGuardValue) << "wrote past n = " << n;
  out.resize(static_cast<size_t>(n));
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

const int64_t kLengths[] = {0, 1, 3, 4, 5, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 513, 1000, 4099};
const std::pair<uint64_t, uint64_t> kKeyStreams[] = {
    {0, 0}, {1, 0}, {0, 1}, {0x243F6A8885A308D3ull, 17}, {~0ull, ~0ull}, {0xDEADBEEFull << 32, 1ull << 40}};

TEST(PhiloxNormals, WidePathsAndSse2GiveTheSameBits) {
  if (!have_avx2()) GTEST_SKIP() << "no AVX2 on this CPU";
  for (NormalsPath path : {NormalsPath::kAvx2, NormalsPath::kAvx512}) {
    if (!normals_path_supported(path)) continue;  // AVX-512: said by WidestPathIsTheDefault
    for (const auto& [key, stream] : kKeyStreams)
      for (int64_t n : kLengths)
        EXPECT_TRUE(same_bits(normals(path, key, stream, n), normals(NormalsPath::kSse2, key, stream, n)))
            << normals_path_name(path) << ": key " << key << " stream " << stream << " n " << n;
  }
  std::vector<float> best(1000);
  philox_normals(5, 6, best.data(), 1000);
  EXPECT_TRUE(same_bits(best, normals(NormalsPath::kSse2, 5, 6, 1000))) << "philox_normals itself";
}

// normals_math.h one float at a time (NormalsScalar, over the scalar Philox): what a CUDA
// thread computes (experiments/icl_prompts.cu, where the float type rounds each operation
// alone as this file's -ffp-contract=off does), the same bits as every vector path.
TEST(PhiloxNormals, OneFloatAtATimeGivesTheSameBits) {
  for (const auto& [key, stream] : kKeyStreams) {
    const std::vector<float> want = normals(NormalsPath::kSse2, key, stream, 4099);
    std::vector<float> got(want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      const uint64_t b = i / 4;
      const Ctr c = philox4x32_10(Ctr{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32),
                                      static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                                  Key{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
      const uint32_t w[4] = {c[0], c[1], c[2], c[3]};
      got[i] = normal_of_block<NormalsScalar>(w, static_cast<int>(i % 4));
    }
    EXPECT_TRUE(same_bits(got, want)) << "key " << key << " stream " << stream;
  }
}

// philox_normals takes the widest path the CPU has; one it lacks is refused by name.
TEST(PhiloxNormals, WidestPathIsTheDefault) {
  const NormalsPath best = normals_best_path();
  EXPECT_TRUE(normals_path_supported(best));
  if (have_avx512()) {
    EXPECT_EQ(best, NormalsPath::kAvx512);
  } else {
    std::vector<float> out(16);
    EXPECT_THROW(philox_normals_path(NormalsPath::kAvx512, 1, 2, out.data(), 16), std::runtime_error);
    std::printf("no AVX-512F on this CPU: its path is not checked here\n");
  }
}

TEST(PhiloxNormals, PrefixesAgree) {
  for (NormalsPath path : {NormalsPath::kSse2, NormalsPath::kAvx2, NormalsPath::kAvx512}) {
    if (!normals_path_supported(path)) continue;
    const std::vector<float> all = normals(path, 42, 3, 4099);
    for (int64_t m : kLengths)
      EXPECT_TRUE(same_bits(std::vector<float>(all.begin(), all.begin() + m), normals(path, 42, 3, m))) << "m " << m;
  }
}

TEST(PhiloxNormals, KeysAndStreamsDiffer) {
  const std::vector<float> a = normals(NormalsPath::kSse2, 1, 2, 64);
  EXPECT_FALSE(same_bits(a, normals(NormalsPath::kSse2, 2, 2, 64)));
  EXPECT_FALSE(same_bits(a, normals(NormalsPath::kSse2, 1, 3, 64)));
  EXPECT_FALSE(same_bits(a, normals(NormalsPath::kSse2, 1ull << 32 | 1, 2, 64))) << "the key's high word counts";
  EXPECT_FALSE(same_bits(a, normals(NormalsPath::kSse2, 1, 1ull << 32 | 2, 64))) << "the stream's high word counts";
}

double ulp_of(double x) {
  int e;
  std::frexp(x, &e);  // |x| = m 2^e with m in [0.5, 1): a float's ulp there is 2^(e - 24)
  return std::ldexp(1.0, e - 24);
}

// normals.h's definition, in float64 from the scalar Philox: output i of (key, stream).
double reference_normal(uint64_t key, uint64_t stream, int64_t i) {
  const uint64_t b = static_cast<uint64_t>(i / 4);
  const Ctr w = philox4x32_10(Ctr{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32),
                                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)},
                              Key{static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)});
  const int pair = static_cast<int>(i % 4) / 2;
  const double u1 = std::ldexp(static_cast<double>((w[2 * pair] >> 8) + 1), -24);
  const double u2 = std::ldexp(static_cast<double>(w[2 * pair + 1] >> 8), -24);
  const double r = std::sqrt(-2.0 * std::log(u1));
  return i % 2 == 0 ? r * std::cos(2 * M_PI * u2) : r * std::sin(2 * M_PI * u2);
}

// Each output is r cos or r sin with r and the sine within 1 and 1.7 ulp (below): within
// 4 ulp of the float64 value, or 2e-7 absolutely near the zeros of sin and cos.
TEST(PhiloxNormals, IsFloat64BoxMullerOfThePhiloxWords) {
  const int64_t n = 1 << 18;
  const uint64_t kKey = 0x0123456789ABCDEFull, kStream = 0xFEDCBA9876543210ull;  // both words of each used
  const std::vector<float> out = normals(NormalsPath::kSse2, kKey, kStream, n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = reference_normal(kKey, kStream, i);
    const double err = std::fabs(out[static_cast<size_t>(i)] - want);
    worst = std::max(worst, err / std::max(ulp_of(want), 5e-8));
    ASSERT_LE(err, std::max(4 * ulp_of(want), 2e-7))
        << "i " << i << " got " << out[static_cast<size_t>(i)] << " want " << want;
  }
  std::printf("largest difference from float64 Box-Muller: %.2f ulp\n", worst);
}

// Every input the generator gives them: u = (k + 1) 2^-24 for ln, k 2^-24 turns for sin
// and cos, k = 0 .. 2^24 - 1. Measured (GCC 12, x86-64): ln 0.87 ulp, sin and cos 1.68 ulp
// (the largest just below 0.25 in magnitude, where the ulp halves); sin and cos are exact
// at the quarter turns.
TEST(PhiloxNormals, MathFunctionErrorsOverEveryInput) {
  const int64_t n = int64_t{1} << 24;
  std::vector<float> u(static_cast<size_t>(n)), ln(u.size()), sn(u.size()), cs(u.size());
  std::vector<uint32_t> k(u.size());
  for (int64_t i = 0; i < n; ++i) {
    u[static_cast<size_t>(i)] = std::ldexp(static_cast<float>(i + 1), -24);
    k[static_cast<size_t>(i)] = static_cast<uint32_t>(i);
  }
  normals_log(u.data(), ln.data(), n);
  normals_sincos_2pi(k.data(), sn.data(), cs.data(), n);
  double ln_ulp = 0, sin_ulp = 0, cos_ulp = 0;
  for (int64_t i = 0; i < n; ++i) {
    const size_t s = static_cast<size_t>(i);
    const double ln_want = std::log(static_cast<double>(u[s]));
    if (ln_want != 0) ln_ulp = std::max(ln_ulp, std::fabs(ln[s] - ln_want) / ulp_of(ln_want));
    const double turn = 2 * M_PI * std::ldexp(static_cast<double>(i), -24);
    if (i % (1 << 23) != 0) sin_ulp = std::max(sin_ulp, std::fabs(sn[s] - std::sin(turn)) / ulp_of(std::sin(turn)));
    if ((i + (1 << 22)) % (1 << 23) != 0)
      cos_ulp = std::max(cos_ulp, std::fabs(cs[s] - std::cos(turn)) / ulp_of(std::cos(turn)));
  }
  std::printf("largest errors: ln %.3f ulp, sin %.3f ulp, cos %.3f ulp\n", ln_ulp, sin_ulp, cos_ulp);
  EXPECT_LT(ln_ulp, 1.0);
  EXPECT_LT(sin_ulp, 2.0);
  EXPECT_LT(cos_ulp, 2.0);
  EXPECT_EQ(ln[static_cast<size_t>(n - 1)], 0.0f) << "ln 1";
  for (int q = 0; q < 4; ++q) {  // quarter turns: sin, cos in {0, 1, -1} exactly
    const size_t s = static_cast<size_t>(q) << 22;
    EXPECT_EQ(sn[s], static_cast<float>((q == 1) - (q == 3))) << "sin, quarter " << q;
    EXPECT_EQ(cs[s], static_cast<float>((q == 0) - (q == 2))) << "cos, quarter " << q;
  }
}

double normal_cdf(double x) {
  return 0.5 * std::erfc(-x / std::sqrt(2.0));
}

// 4M normals: each statistic within 5 standard errors of the normal's value (a false
// alarm about once in 2 million per statistic), the CDF within 3e-3 at 20 points (its
// standard error is at most 0.5 / 2048 = 2.4e-4).
TEST(PhiloxNormals, Statistics) {
  const int64_t n = int64_t{1} << 22;
  const std::vector<float> z = normals(normals_best_path(), 2024, 0, n);
  const double nd = static_cast<double>(n);
  double sum = 0, sum2 = 0;
  for (float x : z) {
    sum += x;
    sum2 += static_cast<double>(x) * x;
  }
  const double mean = sum / nd, var = sum2 / nd - mean * mean;
  EXPECT_LT(std::fabs(mean), 5 / std::sqrt(nd)) << "mean";
  EXPECT_LT(std::fabs(var - 1), 5 * std::sqrt(2 / nd)) << "variance";
  for (double t : {1.0, 2.0, 3.0}) {
    const double p = 2 * normal_cdf(-t);
    const double frac =
        static_cast<double>(std::count_if(z.begin(), z.end(), [t](float x) { return std::fabs(x) > t; })) / nd;
    EXPECT_LT(std::fabs(frac - p), 5 * std::sqrt(p * (1 - p) / nd)) << "P(|z| > " << t << ")";
  }
  std::vector<float> sorted = z;
  std::sort(sorted.begin(), sorted.end());
  for (int j = 0; j < 20; ++j) {
    const double x = -3.0 + 6.0 * j / 19;
    const double cdf = static_cast<double>(std::upper_bound(sorted.begin(), sorted.end(), x) - sorted.begin()) / nd;
    EXPECT_LT(std::fabs(cdf - normal_cdf(x)), 3e-3) << "CDF at " << x;
  }
  // Correlations of neighbours (lag 1: the two of a Box-Muller pair; lag 2: the two pairs
  // of a block; lag 4: neighbouring blocks) and with another stream: each has standard
  // error 1 / sqrt(n).
  const std::vector<float> other = normals(NormalsPath::kSse2, 2024, 1, n);
  const auto corr = [&](const std::vector<float>& a, const std::vector<float>& b, int64_t lag) {
    double s = 0;
    for (int64_t i = 0; i + lag < n; ++i)
      s += static_cast<double>(a[static_cast<size_t>(i)]) * b[static_cast<size_t>(i + lag)];
    return s / static_cast<double>(n - lag);
  };
  for (int64_t lag : {1, 2, 4}) EXPECT_LT(std::fabs(corr(z, z, lag)), 5 / std::sqrt(nd)) << "lag " << lag;
  EXPECT_LT(std::fabs(corr(z, other, 0)), 5 / std::sqrt(nd)) << "streams 0 and 1";
}

}  // namespace
}  // namespace attnsweep
