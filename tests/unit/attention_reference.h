// The float64 attention reference of the tests (CPU and CUDA): materialised S, phi(S),
// P V; the backward by the chain rule, softmax through its Jacobian. Written plainly and
// apart from the kernels' forms (phi and phi' from the registry's ref_phi / ref_dphi,
// std::pow and std::exp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"

namespace attnsweep {

inline double ref_scale_c(const ActivationSpec& a, int64_t n) {
  switch (a.scale) {
    case ScaleKind::none: return 1.0;
    case ScaleKind::inv_sqrt_n: return 1.0 / std::sqrt(static_cast<double>(n));
    case ScaleKind::inv_n: return 1.0 / static_cast<double>(n);
    case ScaleKind::value: return a.scale_value;
  }
  return 1.0;
}

// The registry's plain float64 phi and phi' (kernels/activation.h: ref_phi / ref_dphi,
// written with std::pow and std::exp, apart from the kernels' forms).
inline double ref_phi(const ActivationSpec& a, double s, int64_t n) {
  const ActivationInfo& info = activation_info(a.activation);
  return info.ref_phi ? info.ref_phi(s, ref_scale_c(a, n), a.degree, -std::log(static_cast<double>(n))) : 0.0;
}

inline double ref_dphi(const ActivationSpec& a, double s, int64_t n) {
  const ActivationInfo& info = activation_info(a.activation);
  return info.ref_dphi ? info.ref_dphi(s, ref_scale_c(a, n), a.degree, -std::log(static_cast<double>(n))) : 0.0;
}

struct Ref {
  std::vector<double> O, dQ, dK, dV, attn, jac;
};

// Q [B,H,Nq,d], K [B,H,Nk,d], V [B,H,Nk,dv], dO [B,H,Nq,dv] (may be empty), mask [B,Nk].
// jacobian = false skips softmax's Jacobian (jac stays 0, and dQ, dK: pass no dO), whose
// Nk^2 a row the tests of long rows cannot afford.
inline Ref reference(const AttentionSpec& spec, const AttentionShape& sh, const std::vector<double>& Q,
                     const std::vector<double>& K, const std::vector<double>& V, const std::vector<double>& mask,
                     const std::vector<double>& dO, bool jacobian = true) {
  const int64_t B = sh.B, H = sh.H, Nq = sh.Nq, Nk = sh.Nk, d = sh.d, dv = sh.dv;
  const double scale = spec.score_scale != 0.0f ? spec.score_scale : 1.0 / std::sqrt(static_cast<double>(d));
  const bool softmax = spec.act.activation == Activation::softmax;
  Ref r;
  r.O.assign(B * H * Nq * dv, 0.0);
  r.dQ.assign(B * H * Nq * d, 0.0);
  r.dK.assign(B * H * Nk * d, 0.0);
  r.dV.assign(B * H * Nk * dv, 0.0);
  r.attn.assign(B * H, 0.0);
  r.jac.assign(B * H, 0.0);
  std::vector<double> S(Nk), P(Nk), G(Nk), dP(Nk), dS(Nk);
  std::vector<char> vis(Nk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      const double* q = &Q[bh * Nq * d];
      const double* k = &K[bh * Nk * d];
      const double* v = &V[bh * Nk * dv];
      double attn = 0, jac = 0;
      for (int64_t i = 0; i < Nq; ++i) {
        int64_t n = 0;
        for (int64_t j = 0; j < Nk; ++j) {
          vis[j] = (mask.empty() || mask[b * Nk + j] != 0.0) && (!spec.causal || j <= i + Nk - Nq);
          n += vis[j];
          double s = 0;
          for (int64_t c = 0; c < d; ++c) s += q[i * d + c] * k[j * d + c];
          S[j] = scale * s;
        }
        if (n == 0) continue;  // attends nothing: output, gradients and norms stay 0
        if (softmax) {
          double mx = -INFINITY, z = 0;
          for (int64_t j = 0; j < Nk; ++j)
            if (vis[j]) mx = std::max(mx, S[j]);
          for (int64_t j = 0; j < Nk; ++j) z += vis[j] ? std::exp(S[j] - mx) : 0.0;
          for (int64_t j = 0; j < Nk; ++j) P[j] = vis[j] ? std::exp(S[j] - mx) / z : 0.0;
        } else {
          for (int64_t j = 0; j < Nk; ++j) {
            P[j] = vis[j] ? ref_phi(spec.act, S[j], n) : 0.0;
            G[j] = vis[j] ? ref_dphi(spec.act, S[j], n) : 0.0;
          }
        }
        for (int64_t j = 0; j < Nk; ++j) {
          attn += P[j] * P[j];
          for (int64_t c = 0; c < dv; ++c) r.O[(bh * Nq + i) * dv + c] += P[j] * v[j * dv + c];
        }
        if (!dO.empty())
          for (int64_t j = 0; j < Nk; ++j) {
            double s = 0;
            for (int64_t c = 0; c < dv; ++c) s += dO[(bh * Nq + i) * dv + c] * v[j * dv + c];
            dP[j] = s;
          }
        if (softmax && jacobian) {
          // J_kl = dP_k/dS_l = p_k (delta_kl - p_l) over attended keys; dS = J^T dP.
          for (int64_t l = 0; l < Nk; ++l) {
            dS[l] = 0;
            if (!vis[l]) continue;
            for (int64_t kk = 0; kk < Nk; ++kk) {
              if (!vis[kk]) continue;
              const double J = P[kk] * ((kk == l ? 1.0 : 0.0) - P[l]);
              jac += J * J;
              if (!dO.empty()) dS[l] += J * dP[kk];
            }
          }
        } else {
          for (int64_t j = 0; j < Nk; ++j) {
            jac += G[j] * G[j];
            dS[j] = G[j] * (dO.empty() ? 0.0 : dP[j]);
          }
        }
        if (dO.empty()) continue;
        for (int64_t j = 0; j < Nk; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            r.dQ[(bh * Nq + i) * d + c] += scale * dS[j] * k[j * d + c];
            r.dK[(bh * Nk + j) * d + c] += scale * dS[j] * q[i * d + c];
          }
          for (int64_t c = 0; c < dv; ++c) r.dV[(bh * Nk + j) * dv + c] += P[j] * dO[(bh * Nq + i) * dv + c];
        }
      }
      r.attn[bh] = std::sqrt(attn);
      r.jac[bh] = std::sqrt(jac);
    }
  return r;
}

}  // namespace attnsweep
