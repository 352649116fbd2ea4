// Small numerical helpers of the CPU kernels that must vectorise inside `omp simd` loops.
#pragma once

#include <cstdint>
#include <cstring>

namespace attnsweep::cpu {

// exp(x) in float32, branch-free so that GCC vectorises it (glibc's expf only vectorises
// under -ffast-math). Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2, then a degree-6
// Taylor polynomial of e^r (truncation < 1.2e-7 relative) and 2^k from the exponent bits:
// about 2 ulp. exp(x) = 0 for x < -87.33 (below FLT_MIN), saturates near 2^127*1.4 above.
inline float fast_expf(float x) {
  const float lo = -87.33f, hi = 88.37f;
  const float xc = x < lo ? lo : (x > hi ? hi : x);
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (xc * 1.44269504088896341f + shifter) - shifter;
  const float r = (xc - kf * 0.693145751953125f) - kf * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(kf) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale;
  return x < lo ? 0.0f : y;
}

}  // namespace attnsweep::cpu
