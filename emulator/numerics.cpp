// The emulated device's arithmetic where the hardware's is not IEEE's correctly rounded
// one: the tensor-core mma's inner product and the approximate instructions (ex2.approx,
// hence __expf), in two modes (ATTNSWEEP_EMULATED_NUMERICS, docs/cuda-emulator.md):
//
//   exact (default): the mma's 16 exact products and the accumulator summed in float64
//     and rounded once to float32; ex2.approx correctly rounded. Tighter than any GPU.
//   hardware: as the tensor cores measure (Fasi, Higham, Mikaitis and Pranesh 2021 for
//     V100/A100: each group of 8 products is added to the accumulator in one step, every
//     addend aligned to the largest one's exponent with the bits below float32's 24
//     truncated, the sum truncated to float32, so a k-16 mma rounds twice, towards zero);
//     ex2.approx's result moved by up to 2 ulp (its documented bound), as a fixed
//     function of the input, exact at integer inputs (2^n) as the hardware is.
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emulator/emu.h"

namespace attnsweep::emu {

// Read once when the emulator's library is loaded (before main and before any kernel),
// so that numerics() is a load of a constant at every ex2 and mma.
const Numerics detail::g_numerics = [] {
  const char* e = std::getenv("ATTNSWEEP_EMULATED_NUMERICS");
  if (!e || !*e || std::strcmp(e, "exact") == 0) return Numerics::exact;
  if (std::strcmp(e, "hardware") == 0) return Numerics::hardware;
  std::fprintf(stderr, "attnsweep emulator: ATTNSWEEP_EMULATED_NUMERICS=%s: expected exact or hardware\n", e);
  std::exit(2);
}();

float perturbed(float x, uint32_t seed, int ulps) {
  if (!std::isfinite(x) || x == 0.0f || ulps == 0) return x;
  uint32_t h = seed * 0x9e3779b9u;  // a fixed mix of the input's bits (murmur3's finaliser)
  h ^= h >> 16, h *= 0x85ebca6bu, h ^= h >> 13, h *= 0xc2b2ae35u, h ^= h >> 16;
  const int k = static_cast<int>(h % static_cast<uint32_t>(2 * ulps + 1)) - ulps;
  const float to = k > 0 ? INFINITY : -INFINITY;
  for (int i = 0; i < std::abs(k); ++i) x = std::nextafter(x, to);
  return x;
}

namespace {

// A float64 value exact in float32's 24 bits and more, truncated to float32 (towards zero).
float toward_zero(double s) {
  float f = static_cast<float>(s);
  if (std::fabs(static_cast<double>(f)) > std::fabs(s)) f = std::nextafter(f, 0.0f);
  return f;
}

// One step of the hardware's inner product: c and n exact products, each aligned to the
// largest magnitude's exponent e and truncated to a multiple of 2^(e-23) (exact in float64:
// each is below 2^(e+1) and n + 1 <= 9 of them need at most 28 bits), summed, truncated.
// The hot loop of the hardware numerics, so in bits: a non-negative double's bits order
// as its value, the exponent is bits 52..62, and a value below 2^24 in magnitude truncates
// towards zero by conversion to an integer.
float fused_group(float c, const float* a, const float* b, int n) {
  constexpr uint64_t kMagnitude = ~(uint64_t{1} << 63);
  double t[9];
  t[0] = c;
  uint64_t largest = std::bit_cast<uint64_t>(t[0]) & kMagnitude;
  for (int i = 0; i < n; ++i) {
    t[i + 1] = static_cast<double>(a[i]) * b[i];  // exact: two 16-bit significands
    const uint64_t m = std::bit_cast<uint64_t>(t[i + 1]) & kMagnitude;
    largest = m > largest ? m : largest;
  }
  const int64_t biased = static_cast<int64_t>(largest >> 52);  // e + 1023
  // Zero, infinity or NaN (exponent field 0x7ff orders above every finite value): a plain
  // sum gives IEEE's answer. Every other largest is normal in float64 (a float, or a
  // product of two bf16/f16 values, at least 2^-300), so e - 23 and 23 - e are normal too.
  if (largest == 0 || biased == 0x7ff) {
    double s = 0;
    for (int i = 0; i <= n; ++i) s += t[i];
    return static_cast<float>(s);
  }
  const double q = std::bit_cast<double>(static_cast<uint64_t>(biased - 23) << 52);                 // 2^(e-23)
  const double per_q = std::bit_cast<double>(static_cast<uint64_t>(2 * 1023 + 23 - biased) << 52);  // 2^(23-e)
  double s = 0;
  for (int i = 0; i <= n; ++i) s += static_cast<double>(static_cast<int64_t>(t[i] * per_q)) * q;
  return toward_zero(s);
}

}  // namespace

float mma_dot16(const float* a, const float* b, float c, Numerics mode) {
  if (mode == Numerics::hardware) return fused_group(fused_group(c, a, b, 8), a + 8, b + 8, 8);
  // The 16 products are exact in float (at most 22 significant bits); summed with c in
  // float64 (four partial sums, an order the compiler can vectorise), rounded once.
  double part[4] = {0, 0, 0, 0};
  for (int k = 0; k < 16; k += 4)
    for (int j = 0; j < 4; ++j) part[j] += static_cast<double>(a[k + j] * b[k + j]);
  return static_cast<float>(static_cast<double>(c) + ((part[0] + part[1]) + (part[2] + part[3])));
}

}  // namespace attnsweep::emu
