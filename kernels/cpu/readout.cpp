// The read-out in its own algebra (kernels/readout.h): per block of prompts, each prompt
// turned feature-major once (C rows of L keys, in L1), then every cell of the call runs its
// forward (and backward) on it as a few passes over those rows.
#include "kernels/readout.h"
#include "base/options.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/aligned_scratch.h"
#include "kernels/cpu/vec.h"

namespace attnsweep {

namespace {

// ATTNSWEEP_READOUT_ALGEBRA=0 in the environment: the generic path from the start.
std::atomic<bool> g_algebra{options::readout_algebra()};

// clang does not clone function templates (the fuzz build): the default path only.
#if defined(__clang__)
#define READOUT_CLONES
#else
#define READOUT_CLONES __attribute__((target_clones("avx2", "default")))
#endif

// Prompts per block: the unit of the sums' order, a constant, so a cell's values depend on
// neither the thread count nor the other cells of the call.
constexpr int64_t kBlockPrompts = 4;
// Key rows are padded to a multiple of this (zeros), so every row pass runs whole vectors.
constexpr int64_t kPad = 16;

struct FastExp {
  float operator()(float x) const { return cpu::fast_expf(x); }
};

using cpu::f32x8;

// p[n] = exp(s[n] - mx) for n < P (a multiple of 8): fast_expf 8 lanes at a time (GCC does
// not vectorise fast_expf's loop by itself here).
[[gnu::always_inline]] inline void exp_rows(const float* s, float mx, float* p, int64_t P) {
  for (int64_t n = 0; n < P; n += 8) {
    f32x8 x;
    std::memcpy(&x, s + n, sizeof x);
    x -= mx;
    cpu::fast_exp_inplace(x);
    std::memcpy(p + n, &x, sizeof x);
  }
}

// One prompt, feature-major: row j of xs holds coordinate j of the L keys, then zeros up
// to P; z is the query.
struct Prompt {
  const float* xs;
  const float* z;
  int64_t L, P;
  // G = sum_n x_n x_n^T over the keys (C x C), made when a cell of the call is linear
  // (poly of degree 1): for it phi(s) = c s, so m = c G u and du = c G dm, O(C^2) a prompt.
  const float* G;
};

// Per-thread rows of one cell's pass over a prompt.
struct Rows {
  float *s, *p, *dp;
};

// What one cell's pass over one prompt adds to its block's sums.
struct PromptSums {
  double* grad;  // (3C, C) float64, added to (train only)
  double loss = 0;
};

// The row passes hold their running sums in registers (8 keys at a time), so that each
// row of xs is read once a pass: GCC's own vectorisation of these loops read and wrote the
// output row once per coordinate. No vector crosses a call (see exp_rows).
[[gnu::always_inline]] inline void load8(f32x8& v, const float* p) {
  std::memcpy(&v, p, sizeof v);
}

// out[n] = sum_j u[j] xs[j][n] (in j order), n < P (a multiple of 16): two chains of
// sums at once, for the adds' latency.
[[gnu::always_inline]] inline void combine_rows(const float* xs, int64_t C, int64_t P, const float* u, float* out) {
  for (int64_t n = 0; n < P; n += 16) {
    f32x8 a, b, x, y;
    load8(x, xs + n);
    load8(y, xs + n + 8);
    a = u[0] * x;
    b = u[0] * y;
    for (int64_t j = 1; j < C; ++j) {
      load8(x, xs + j * P + n);
      load8(y, xs + j * P + n + 8);
      a += u[j] * x;
      b += u[j] * y;
    }
    std::memcpy(out + n, &a, sizeof a);
    std::memcpy(out + n + 8, &b, sizeof b);
  }
}

// max of s[0, L): 8 lanes, then the tail.
[[gnu::always_inline]] inline float row_max(const float* s, int64_t L) {
  f32x8 m = f32x8{} - std::numeric_limits<float>::infinity(), x;
  int64_t n = 0;
  for (; n + 8 <= L; n += 8) {
    load8(x, s + n);
    m = x > m ? x : m;
  }
  float l[8];
  std::memcpy(l, &m, sizeof l);
  float mx = l[0];
  for (int k = 1; k < 8; ++k) mx = std::max(mx, l[k]);
  for (; n < L; ++n) mx = std::max(mx, s[n]);
  return mx;
}

// The lanes of a sum in a fixed order.
[[gnu::always_inline]] inline float lane_sum(const f32x8& v) {
  float l[8];
  std::memcpy(l, &v, sizeof l);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// out[j] = sum_n w[n] xs[j][n], j < C: 8 lane sums over the keys, then the lanes in order;
// four coordinates a pass over w (xs has rows up to a multiple of 4, the extra ones zero).
[[gnu::always_inline]] inline void project_rows(const float* xs, int64_t C, int64_t P, const float* w, float* out) {
  for (int64_t j0 = 0; j0 < C; j0 += 4) {
    const float *r0 = xs + j0 * P, *r1 = r0 + P, *r2 = r1 + P, *r3 = r2 + P;
    f32x8 a0 = {}, a1 = {}, a2 = {}, a3 = {}, wv, x;
    for (int64_t n = 0; n < P; n += 8) {
      load8(wv, w + n);
      load8(x, r0 + n);
      a0 += wv * x;
      load8(x, r1 + n);
      a1 += wv * x;
      load8(x, r2 + n);
      a2 += wv * x;
      load8(x, r3 + n);
      a3 += wv * x;
    }
    const float sums[4] = {lane_sum(a0), lane_sum(a1), lane_sum(a2), lane_sum(a3)};
    for (int64_t k = 0; k < 4 && j0 + k < C; ++k) out[j0 + k] = sums[k];
  }
}

// out = M v, M (C, C) row-major.
[[gnu::always_inline]] inline void mat_vec(const float* M, int64_t C, const float* v, float* out) {
  for (int64_t i = 0; i < C; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < C; ++j) acc += M[i * C + j] * v[j];
    out[i] = acc;
  }
}

// G = sum_n x_n x_n^T (Prompt::G): row i is project_rows of key row i, so G is symmetric
// to the bit.
READOUT_CLONES void gram_rows(const float* xs, int64_t C, int64_t P, float* G) {
  for (int64_t i = 0; i < C; ++i) project_rows(xs, C, P, xs + i * P, G + i * C);
}

constexpr int kMaxC = 65;  // d <= 64 (experiments/icl_regression.cpp)

// Head h's query q = Q_h z (hd) and u = K_h^T q scale (C): its scores are s_n = u . x_n.
[[gnu::always_inline]] inline void head_query(const float* Qh, const float* Kh, int64_t C, int64_t hd, float scale,
                                              const float* z, float* q, float* u) {
  for (int64_t i = 0; i < hd; ++i) {
    float acc = 0.0f;
    for (int64_t j = 0; j < C; ++j) acc += Qh[i * C + j] * z[j];
    q[i] = acc;
  }
  for (int64_t j = 0; j < C; ++j) u[j] = 0.0f;
  for (int64_t i = 0; i < hd; ++i) {
    const float qi = q[i] * scale;
    for (int64_t j = 0; j < C; ++j) u[j] += Kh[i * C + j] * qi;
  }
}

// The forward of one head's scores: rows.p = phi(s) (softmax: the normalised row), zeros
// from L to P; returns the row's norm sums (when norms). With gram (linear attention
// through G) no pass over the keys: Gu = G u, and p is not made.
template <Activation A, int32_t Deg>
[[gnu::always_inline]] inline RowNormSq scores_forward(const PhiParams& pp, const Prompt& pr, int64_t C, const float* u,
                                                       bool gram, bool norms, float* Gu, const Rows& rows) {
  const int64_t L = pr.L, P = pr.P;
  float* s = rows.s;
  float* p = rows.p;
  RowNormSq nrm;
  if (gram) {
    mat_vec(pr.G, C, u, Gu);
    double uGu = 0.0;
    for (int64_t j = 0; j < C; ++j) uGu += static_cast<double>(u[j]) * Gu[j];
    const double c = pp.c;
    nrm.attn = c * c * uGu;  // sum_n (c s_n)^2
    nrm.jac = static_cast<double>(L) * c * c;
    return nrm;
  }
  if constexpr (A == Activation::softmax) {
    combine_rows(pr.xs, C, P, u, s);
    const float mx = row_max(s, L);
    exp_rows(s, mx, p, P);
    for (int64_t n = L; n < P; ++n) p[n] = 0.0f;
    // Z (and the norms' sums) in float64, in a loop of their own: it vectorises apart
    // from the exp's float32 one.
    double z = 0.0;
#pragma omp simd reduction(+ : z)
    for (int64_t n = 0; n < L; ++n) z += static_cast<double>(p[n]);
    if (norms) {
      double a2 = 0.0, a3 = 0.0;
#pragma omp simd reduction(+ : a2, a3)
      for (int64_t n = 0; n < L; ++n) {
        const double e = p[n];
        a2 += e * e;
        a3 += e * e * e;
      }
      nrm = softmax_row_norms_from_sums(z, a2, a3);
    }
    const float inv = static_cast<float>(1.0 / z);
#pragma omp simd
    for (int64_t n = 0; n < L; ++n) p[n] *= inv;
  } else {
    combine_rows(pr.xs, C, P, u, s);
#pragma omp simd
    for (int64_t n = 0; n < L; ++n) p[n] = phi_fixed<A, Deg>(pp, s[n], FastExp{});
    if (norms) {
      double sa = 0.0, sj = 0.0;
#pragma omp simd reduction(+ : sa, sj)
      for (int64_t n = 0; n < L; ++n) {
        const double v = p[n], g = dphi_fixed<A, Deg>(pp, s[n], FastExp{});
        sa += v * v;
        sj += g * g;
      }
      nrm.attn = sa;
      nrm.jac = sj;
    }
  }
  for (int64_t n = L; n < P; ++n) p[n] = 0.0f;
  return nrm;
}

// The backward of the scores: du = sum_n ds_n x_n from dm (dphi_n = x_n . dm; softmax:
// the row's Jacobian-vector product). With gram: du = c G dm.
template <Activation A, int32_t Deg>
[[gnu::always_inline]] inline void scores_backward(const PhiParams& pp, const Prompt& pr, int64_t C, const float* dm,
                                                   bool gram, const Rows& rows, float* du) {
  const int64_t L = pr.L, P = pr.P;
  const float* s = rows.s;
  const float* p = rows.p;
  float* dp = rows.dp;
  if (gram) {
    float Gdm[kMaxC];
    mat_vec(pr.G, C, dm, Gdm);
    for (int64_t j = 0; j < C; ++j) du[j] = pp.c * Gdm[j];
  } else if constexpr (A == Activation::softmax) {
    combine_rows(pr.xs, C, P, dm, dp);
    float D = 0.0f;
#pragma omp simd reduction(+ : D)
    for (int64_t n = 0; n < P; ++n) D += p[n] * dp[n];
#pragma omp simd
    for (int64_t n = 0; n < P; ++n) dp[n] = p[n] * (dp[n] - D);
    project_rows(pr.xs, C, P, dp, du);
  } else {
    combine_rows(pr.xs, C, P, dm, dp);
#pragma omp simd
    for (int64_t n = 0; n < L; ++n) dp[n] *= dphi_fixed<A, Deg>(pp, s[n], FastExp{});
    for (int64_t n = L; n < P; ++n) dp[n] = 0.0f;
    project_rows(pr.xs, C, P, dp, du);
  }
}

// One cell, one prompt: pred, the loss term, the norms of every head (norms) and the
// gradient terms (train). A template over the activation so that the row loops vectorise;
// one clone per instruction set.
template <Activation A, int32_t Deg>
READOUT_CLONES void cell_prompt(const ReadoutShape& sh, const ReadoutCell& cell, const PhiParams& pp, const Prompt& pr,
                                float y, bool train, bool norms, int64_t b, const Rows& rows, PromptSums& sums) {
  const int64_t C = sh.C, H = sh.H, hd = C / H;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const float* W = cell.qkv_w;
  float q[kMaxC], u[kMaxC], m[kMaxC], dm[kMaxC], du[kMaxC], Gu[kMaxC];
  // Linear attention through G (Prompt::G): no pass over the keys.
  constexpr bool kLinear = A == Activation::poly && Deg == 1;
  const bool gram = kLinear && pr.G != nullptr;
  for (int64_t h = (norms ? 0 : H - 1); h < H; ++h) {
    const float* Qh = W + h * hd * C;
    const float* Kh = W + (C + h * hd) * C;
    head_query(Qh, Kh, C, hd, scale, pr.z, q, u);
    const RowNormSq nrm = scores_forward<A, Deg>(pp, pr, C, u, gram, norms, Gu, rows);
    if (norms) {
      cell.attn_fro[b * H + h] = std::sqrt(nrm.attn);
      cell.jac_fro[b * H + h] = std::sqrt(nrm.jac);
    }
    if (h != H - 1) continue;

    // The prediction: V's row C - 1 (head H - 1's last coordinate) times m.
    if (gram)
      for (int64_t j = 0; j < C; ++j) m[j] = pp.c * Gu[j];
    else
      project_rows(pr.xs, C, pr.P, rows.p, m);
    const float* v_last = W + (3 * C - 1) * C;
    float pred = 0.0f;
    for (int64_t j = 0; j < C; ++j) pred += v_last[j] * m[j];
    if (cell.pred) cell.pred[b] = pred;
    const double err = static_cast<double>(pred) - y;
    sums.loss += err * err;
    if (!train) continue;

    // mse_backward's dpred (kernels/ops.h): 2 / B * (pred - y) in float32.
    const float dpred = (2.0f / static_cast<float>(sh.B)) * (pred - y);
    double* g = sums.grad;
    for (int64_t j = 0; j < C; ++j) {
      g[(3 * C - 1) * C + j] += static_cast<double>(dpred * m[j]);
      dm[j] = dpred * v_last[j];
    }
    scores_backward<A, Deg>(pp, pr, C, dm, gram, rows, du);
    // dK_h += (q scale) du^T, dQ_h += (K_h du scale) z^T.
    for (int64_t i = 0; i < hd; ++i) {
      const float qi = q[i] * scale;
      float dq = 0.0f;
      for (int64_t j = 0; j < C; ++j) {
        g[(C + h * hd + i) * C + j] += static_cast<double>(qi * du[j]);
        dq += Kh[i * C + j] * du[j];
      }
      dq *= scale;
      for (int64_t j = 0; j < C; ++j) g[(h * hd + i) * C + j] += static_cast<double>(dq * pr.z[j]);
    }
  }
}

void run(const ReadoutShape& sh, const float* x, const float* y, std::span<ReadoutCell> cells, bool norms, bool train) {
  const int64_t B = sh.B, N = sh.N, C = sh.C, L = N - 1, P = (L + kPad - 1) / kPad * kPad;
  const int64_t K = static_cast<int64_t>(cells.size()), G = 3 * C * C;
  if (C < 1 || C > 65 || sh.H < 1 || C % sh.H != 0 || N < 2 || B < 0)
    throw std::runtime_error("readout: shape B " + std::to_string(B) + " N " + std::to_string(N) + " C " +
                             std::to_string(C) + " H " + std::to_string(sh.H) +
                             " (expected N >= 2, 1 <= C <= 65, H dividing C)");
  const int64_t nblk = (B + kBlockPrompts - 1) / kBlockPrompts;
  // Per block and cell: the loss sum, then (train) the gradient, float64.
  const int64_t stride = 1 + (train ? G : 0);
  std::vector<double> part(static_cast<size_t>(nblk * K * stride), 0.0);
  bool any_linear = false;
  for (const ReadoutCell& c : cells)
    any_linear = any_linear || (c.act.activation == Activation::poly && c.act.degree == 1);
  std::vector<PhiParams> pp(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) pp[static_cast<size_t>(k)] = resolve_phi(cells[static_cast<size_t>(k)].act, L);

#pragma omp parallel for schedule(static) if (B * N * K > 4096)
  for (int64_t blk = 0; blk < nblk; ++blk) {
    thread_local AlignedScratch scratch;
    // C4 rows of keys (project_rows reads four at a time; rows C .. C4 stay zero), then s, p, dp.
    const int64_t C4 = (C + 3) / 4 * 4;
    float* buf = scratch.get(static_cast<size_t>((C4 + 3) * P + C * C));
    float* gram = buf + (C4 + 3) * P;
    std::memset(buf + C * P, 0, static_cast<size_t>((C4 - C) * P) * sizeof(float));
    const Rows rows{buf + C4 * P, buf + (C4 + 1) * P, buf + (C4 + 2) * P};
    for (int64_t b = blk * kBlockPrompts; b < std::min(B, (blk + 1) * kBlockPrompts); ++b) {
      const float* xb = x + b * N * C;
      for (int64_t n = 0; n < L; ++n)
        for (int64_t j = 0; j < C; ++j) buf[j * P + n] = xb[n * C + j];
      for (int64_t j = 0; j < C; ++j)
        for (int64_t n = L; n < P; ++n) buf[j * P + n] = 0.0f;
      if (any_linear) gram_rows(buf, C, P, gram);
      const Prompt pr{buf, xb + L * C, L, P, any_linear ? gram : nullptr};
      for (int64_t k = 0; k < K; ++k) {
        const ReadoutCell& cell = cells[static_cast<size_t>(k)];
        double* mine = part.data() + (blk * K + k) * stride;
        PromptSums sums{train ? mine + 1 : nullptr};
        dispatch_activation(cell.act, [&](auto tag, auto deg) {
          cell_prompt<decltype(tag)::value, decltype(deg)::value>(sh, cell, pp[static_cast<size_t>(k)], pr, y[b], train,
                                                                  norms, b, rows, sums);
        });
        mine[0] += sums.loss;
      }
    }
  }
  for (int64_t k = 0; k < K; ++k) {
    ReadoutCell& cell = cells[static_cast<size_t>(k)];
    double loss = 0.0;
    std::vector<double> g(static_cast<size_t>(train ? G : 0), 0.0);
    for (int64_t blk = 0; blk < nblk; ++blk) {
      const double* mine = part.data() + (blk * K + k) * stride;
      loss += mine[0];
      for (int64_t i = 0; i < (train ? G : 0); ++i) g[static_cast<size_t>(i)] += mine[1 + i];
    }
    cell.loss = B > 0 ? loss / static_cast<double>(B) : 0.0;
    if (train)
      for (int64_t i = 0; i < G; ++i) cell.grad[i] = static_cast<float>(g[static_cast<size_t>(i)]);
  }
}

}  // namespace

void readout_forward_cpu(const ReadoutShape& shape, const float* x, const float* y, std::span<ReadoutCell> cells,
                         bool norms) {
  run(shape, x, y, cells, norms, false);
}

void readout_train_cpu(const ReadoutShape& shape, const float* x, const float* y, std::span<ReadoutCell> cells,
                       bool norms) {
  run(shape, x, y, cells, norms, true);
}

bool readout_algebra_enabled() {
  return g_algebra.load();
}

void set_readout_algebra(bool on) {
  g_algebra.store(on);
}

}  // namespace attnsweep
