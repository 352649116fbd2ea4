// How an icl_regression prompt is made from its normals (experiments/icl_regression.h),
// written once for the host (experiments/icl_regression.cpp: 8 tokens a vector, then one at
// a time) and for CUDA (experiments/icl_prompts.cu: a token a thread). C++17, no x86
// headers. Every operation rounds alone and in the order below (no a * b + c contracted:
// the host file is compiled with -ffp-contract=off, the device's float type rounds each
// operation by itself), so every lane type gives the same bits.
#pragma once

#include <cstdint>

#include "experiments/normals_math.h"  // ATTNSWEEP_HD

namespace attnsweep {

// The largest d a prompt may have (the task's key "d"): what fixed-size copies of w and
// Sigma's factor are sized by.
inline constexpr int kIclMaxD = 64;

// The draws of one prompt, in stream order (normals 0, 1, ... of its Philox stream): w (d),
// then d rows of T = L + 1 (coordinate k of every token: row k), then T noise draws.
struct IclDraws {
  int64_t d = 0, T = 0;
  ATTNSWEEP_HD int64_t w(int64_t k) const { return k; }
  ATTNSWEEP_HD int64_t g(int64_t k, int64_t t) const { return d + k * T + t; }
  ATTNSWEEP_HD int64_t eps(int64_t t) const { return d + d * T + t; }
  ATTNSWEEP_HD int64_t count() const { return d + d * T + T; }
};

// A token's x = chol g and y = w^T x + noise_sd eps, for F = float, a vector of floats (that
// many tokens at once) or the device's float: chol the d x d lower factor of Sigma
// (row-major), w the prompt's w (w_sd times its draws), g(i) the token's draw of row i,
// eps its noise draw. x[0, d) gets x; returns y.
template <class F, class G>
ATTNSWEEP_HD F icl_token(const float* chol, const float* w, float noise_sd, int64_t d, const G& g, const F& eps, F* x) {
  F y = F{} + 0.0f;
  for (int64_t k = 0; k < d; ++k) {
    F acc = chol[k * d] * g(0);
    for (int64_t i = 1; i <= k; ++i) acc = acc + chol[k * d + i] * g(i);
    x[k] = acc;
    y = y + w[k] * acc;
  }
  return y + noise_sd * eps;
}

}  // namespace attnsweep
