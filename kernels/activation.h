// The attention activation family of science.md, written once: phi, phi' and the
// per-row Frobenius-norm statistics. Used by the CPU kernels, the CUDA kernels and the
// tests (the header compiles under nvcc as __host__ __device__).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__ __forceinline__
#else
#define ATTN_HD inline
#endif

namespace attnsweep {

enum class Activation : int32_t { softmax = 0, poly = 1, relu = 2, sigmoid = 3 };
// Scale c of poly and relu: 1, 1/sqrt(N), 1/N, or a given number.
enum class ScaleKind : int32_t { none = 0, inv_sqrt_n = 1, inv_n = 2, value = 3 };

// What a user asks for: independent of the prompt length.
struct ActivationSpec {
  Activation activation = Activation::softmax;
  int32_t degree = 1;                    // poly only
  ScaleKind scale = ScaleKind::none;     // poly and relu
  double scale_value = 1.0;              // ScaleKind::value only
};

// The spec resolved for N attended keys: phi(s) = c * f(s + bias).
struct PhiParams {
  Activation activation = Activation::softmax;
  int32_t degree = 1;
  float c = 1.0f;     // poly, relu
  float bias = 0.0f;  // sigmoid: -log N
};

ATTN_HD PhiParams resolve_phi(const ActivationSpec& spec, int64_t n_keys) {
  PhiParams p;
  p.activation = spec.activation;
  p.degree = spec.degree;
  const double n = n_keys > 0 ? static_cast<double>(n_keys) : 1.0;
  double c = 1.0;
  switch (spec.scale) {
    case ScaleKind::none: c = 1.0; break;
    case ScaleKind::inv_sqrt_n: c = 1.0 / sqrt(n); break;
    case ScaleKind::inv_n: c = 1.0 / n; break;
    case ScaleKind::value: c = spec.scale_value; break;
  }
  if (spec.activation == Activation::poly || spec.activation == Activation::relu) p.c = static_cast<float>(c);
  if (spec.activation == Activation::sigmoid) p.bias = static_cast<float>(-log(n));  // Apple's b = -log N
  return p;
}

template <class T>
ATTN_HD T ipow(T x, int32_t p) {
  T r = T(1);
  while (p > 0) {
    if (p & 1) r *= x;
    x *= x;
    p >>= 1;
  }
  return r;
}

// Element-wise phi and phi' (softmax is row-wise and handled by its own code paths).
template <class T>
ATTN_HD T phi_elementwise(const PhiParams& p, T s) {
  switch (p.activation) {
    case Activation::poly: return T(p.c) * ipow(s, p.degree);
    case Activation::relu: return s > T(0) ? T(p.c) * s : T(0);
    case Activation::sigmoid: return T(1) / (T(1) + exp(-(s + T(p.bias))));
    default: return T(0);
  }
}

template <class T>
ATTN_HD T dphi_elementwise(const PhiParams& p, T s) {
  switch (p.activation) {
    case Activation::poly: return T(p.c) * T(p.degree) * ipow(s, p.degree - 1);
    case Activation::relu: return s > T(0) ? T(p.c) : T(0);
    case Activation::sigmoid: {
      const T y = T(1) / (T(1) + exp(-(s + T(p.bias))));
      return y * (T(1) - y);
    }
    default: return T(0);
  }
}

// ipow with the exponent fixed at compile time (square-and-multiply, the same products
// as ipow for P <= 4), so that loops over a score row vectorise.
template <int32_t P, class T>
ATTN_HD T ipow_fixed(T x) {
  if constexpr (P <= 0) {
    return T(1);
  } else if constexpr (P == 1) {
    return x;
  } else {
    const T h = ipow_fixed<P / 2>(x);
    if constexpr (P % 2 == 1) return x * (h * h);
    else return h * h;
  }
}

// phi and phi' with the activation (and, for Deg > 0, the poly degree) fixed at compile
// time, for fused kernels whose row loops must vectorise. Deg == 0 reads p.degree.
// exp_fn lets a backend supply its own exp (the CPU kernel passes a vectorisable one).
// The same math as phi_elementwise / dphi_elementwise; tests check that they agree.
template <Activation A, int32_t Deg, class T, class ExpFn>
ATTN_HD T phi_fixed(const PhiParams& p, T s, ExpFn exp_fn) {
  if constexpr (A == Activation::poly) {
    if constexpr (Deg > 0) return T(p.c) * ipow_fixed<Deg>(s);
    else return T(p.c) * ipow(s, p.degree);
  } else if constexpr (A == Activation::relu) {
    return s > T(0) ? T(p.c) * s : T(0);
  } else if constexpr (A == Activation::sigmoid) {
    return T(1) / (T(1) + exp_fn(-(s + T(p.bias))));
  } else {
    return T(0);
  }
}

template <Activation A, int32_t Deg, class T, class ExpFn>
ATTN_HD T dphi_fixed(const PhiParams& p, T s, ExpFn exp_fn) {
  if constexpr (A == Activation::poly) {
    if constexpr (Deg > 0) return T(p.c) * T(Deg) * ipow_fixed<Deg - 1>(s);
    else return T(p.c) * T(p.degree) * ipow(s, p.degree - 1);
  } else if constexpr (A == Activation::relu) {
    return s > T(0) ? T(p.c) : T(0);
  } else if constexpr (A == Activation::sigmoid) {
    const T y = T(1) / (T(1) + exp_fn(-(s + T(p.bias))));
    return y * (T(1) - y);
  } else {
    return T(0);
  }
}

// Squared Frobenius norms of one row of phi(S) and of its Jacobian block.
struct RowNormSq {
  double attn = 0.0;  // sum_j phi(s_j)^2
  double jac = 0.0;   // ||d phi(s) / d s||_F^2 for this row
};

// Softmax row from the running sums of p~ = exp(s - m): Z = sum p~, A2 = sum p~^2,
// A3 = sum p~^3. With p = p~/Z: sum p^2 = A2/Z^2, sum p^3 = A3/Z^3 and
// ||diag(p) - p p^T||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2   (science.md).
ATTN_HD RowNormSq softmax_row_norms_from_sums(double z, double a2, double a3) {
  RowNormSq r;
  const double p2 = a2 / (z * z);
  const double p3 = a3 / (z * z * z);
  r.attn = p2;
  r.jac = p2 - 2.0 * p3 + p2 * p2;
  if (r.jac < 0.0) r.jac = 0.0;  // rounding when p is one-hot
  return r;
}

// Reference row norms over n scores (CPU and tests; kernels fuse the same sums).
template <class T>
ATTN_HD RowNormSq row_norms(const PhiParams& p, const T* s, int64_t n) {
  RowNormSq r;
  if (p.activation == Activation::softmax) {
    T m = s[0];
    for (int64_t j = 1; j < n; ++j) m = s[j] > m ? s[j] : m;
    double z = 0, a2 = 0, a3 = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double e = exp(static_cast<double>(s[j] - m));
      z += e;
      a2 += e * e;
      a3 += e * e * e;
    }
    return softmax_row_norms_from_sums(z, a2, a3);
  }
  for (int64_t j = 0; j < n; ++j) {
    const double v = phi_elementwise<double>(p, static_cast<double>(s[j]));
    const double g = dphi_elementwise<double>(p, static_cast<double>(s[j]));
    r.attn += v * v;
    r.jac += g * g;
  }
  return r;
}

}  // namespace attnsweep
