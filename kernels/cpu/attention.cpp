// CPU attention: blocked over query rows (block_rows(Nk) at a time, 16..256), OpenBLAS
// SGEMM for the products, and one fused pass over each block of scores that applies phi
// (or softmax) and accumulates the norm sums (forward) or forms dS (backward). OpenMP over
// (batch item, head, query block) in the forward and over (batch item, head) in the
// backward, where dK and dV accumulate over the query blocks of one head.
//
// Forward, per block of m query rows (Qb) of one (b, h), keys [0, jmax) visible to some
// row of the block:
//   S  = scale * Qb K^T                  [m, jmax]   sgemm
//   P  = phi(S) (softmax: exp(S - lse))  in place    fused with the norm sums
//   Ob = P V                             [m, dv]     sgemm
// Backward, the same block (P recomputed from S; softmax from the saved lse):
//   dP = dOb V^T                          [m, jmax]   sgemm
//   dS = phi'(S) * dP, softmax: P * (dP - rowsum(dOb * Ob))   fused pass
//   dV += P^T dOb, dQb = scale * dS K, dK += scale * dS^T Qb  sgemm x 3
//
// Vectorisation of the fused passes, without -ffast-math for the whole project:
// - no-trapping-math (this file only; it must precede the headers so that phi_fixed and
//   fast_expf are compiled with it too): GCC will not if-convert `s > 0 ? c*s : 0` or the
//   clamps of fast_expf while a compare might raise an FP exception, and leaves such
//   loops scalar and branchy. We never read the FP exception flags.
// - the row passes are target_clones (AVX-512, AVX2, baseline), picked at load time.
#pragma GCC optimize("no-trapping-math")
#include "kernels/attention.h"
#include "kernels/cpu/vec.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnsweep {
namespace {

// Query rows per block: as many as keep the backward's two [rows, Nk] float buffers
// (S/P and dP/dS) within ~1 MiB, so that they stay in L2 between the SGEMM that writes
// them, the fused pass and the SGEMMs that read them; more rows amortise OpenBLAS's
// packing of K and V (repacked for every block) and lengthen the K = rows dimension of
// dV += P^T dO and dK += dS^T Q. 16..256, a multiple of 16; a function of Nk only, so
// the norms' reduction order does not depend on the thread count.
int64_t block_rows(int64_t Nk) {
  const int64_t budget = int64_t{1} << 20;
  const int64_t rows = budget / (2 * static_cast<int64_t>(sizeof(float)) * std::max<int64_t>(Nk, 1));
  return std::clamp<int64_t>(rows / 16 * 16, 16, 256);
}

#define ATTN_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

struct FastExp {
  float operator()(float x) const { return cpu::fast_expf(x); }
};

// OpenBLAS (Debian's pthread build) would start its own threads inside each of ours:
// keep it single-threaded while one of our OpenMP regions runs more than one thread.
class BlasSingleThreaded {
 public:
  explicit BlasSingleThreaded(int outer_threads) {
    if (outer_threads > 1) {
      saved_ = openblas_get_num_threads();
      if (saved_ != 1) openblas_set_num_threads(1);
    }
  }
  ~BlasSingleThreaded() {
    if (saved_ > 1) openblas_set_num_threads(saved_);
  }
  BlasSingleThreaded(const BlasSingleThreaded&) = delete;
  BlasSingleThreaded& operator=(const BlasSingleThreaded&) = delete;

 private:
  int saved_ = 0;
};

// Which keys query row i attends: keys [0, row_end(i)) whose mask is non-zero.
// prefix[j] = number of attended keys among [0, j) for this batch item (size Nk + 1).
struct Visibility {
  int64_t Nq, Nk;
  bool causal;
  const float* mask;      // key_mask row of this batch item, or null
  const int64_t* prefix;  // Nk + 1 entries
  int64_t row_end(int64_t i) const {
    if (!causal) return Nk;
    return std::clamp<int64_t>(i + (Nk - Nq) + 1, 0, Nk);
  }
  int64_t n_keys(int64_t i) const { return prefix[row_end(i)]; }
};

std::vector<int64_t> key_prefix_counts(const AttentionShape& sh, const float* key_mask) {
  std::vector<int64_t> prefix(static_cast<size_t>(sh.B * (sh.Nk + 1)));
  for (int64_t b = 0; b < sh.B; ++b) {
    int64_t* p = prefix.data() + b * (sh.Nk + 1);
    p[0] = 0;
    for (int64_t j = 0; j < sh.Nk; ++j) p[j + 1] = p[j] + (key_mask == nullptr || key_mask[b * sh.Nk + j] != 0.0f);
  }
  return prefix;
}

// ---- fused row passes ---------------------------------------------------------------

// Softmax forward on scores s[0, n) in place -> p. Returns lse; adds the norm sums.
template <bool Mask, bool Norms>
ATTN_ROW_CLONES float softmax_row_forward(float* s, int64_t n, const float* mask, RowNormSq* nrm) {
  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) {
    const float x = (!Mask || mask[j] != 0.0f) ? s[j] : -std::numeric_limits<float>::infinity();
    mx = x > mx ? x : mx;
  }
  double z = 0.0, a2 = 0.0, a3 = 0.0;
#pragma omp simd reduction(+ : z, a2, a3)
  for (int64_t j = 0; j < n; ++j) {
    float e = cpu::fast_expf(s[j] - mx);
    if constexpr (Mask) e = mask[j] != 0.0f ? e : 0.0f;
    s[j] = e;
    const double ed = e;
    z += ed;
    if constexpr (Norms) {
      a2 += ed * ed;
      a3 += ed * ed * ed;
    }
  }
  const float inv = static_cast<float>(1.0 / z);
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] *= inv;
  if constexpr (Norms) {
    const RowNormSq r = softmax_row_norms_from_sums(z, a2, a3);
    nrm->attn += r.attn;
    nrm->jac += r.jac;
  }
  return mx + static_cast<float>(std::log(z));
}

// Element-wise phi on scores s[0, n) in place; adds sum phi^2 and sum phi'^2.
template <Activation A, int32_t Deg, bool Mask, bool Norms>
ATTN_ROW_CLONES void elementwise_row_forward(const PhiParams& pp, float* s, int64_t n, const float* mask, RowNormSq* nrm) {
  const PhiParams p = pp;  // a local copy: no aliasing with s in the loop
  double sa = 0.0, sj = 0.0;
#pragma omp simd reduction(+ : sa, sj)
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j];
    float v = phi_fixed<A, Deg>(p, x, FastExp{});
    if constexpr (Mask) v = mask[j] != 0.0f ? v : 0.0f;
    s[j] = v;
    if constexpr (Norms) {
      float g = dphi_fixed<A, Deg>(p, x, FastExp{});
      if constexpr (Mask) g = mask[j] != 0.0f ? g : 0.0f;
      sa += static_cast<double>(v) * v;
      sj += static_cast<double>(g) * g;
    }
  }
  if constexpr (Norms) {
    nrm->attn += sa;
    nrm->jac += sj;
  }
}

// Softmax backward on one row: s holds scores -> P, dp holds dP -> dS = P (dP - D).
template <bool Mask>
ATTN_ROW_CLONES void softmax_row_backward(float* s, float* dp, int64_t n, const float* mask, float lse, float D) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    float p = cpu::fast_expf(s[j] - lse);
    if constexpr (Mask) p = mask[j] != 0.0f ? p : 0.0f;
    s[j] = p;
    dp[j] = p * (dp[j] - D);
  }
}

// Element-wise backward on one row: s holds scores -> phi(S), dp holds dP -> phi'(S) dP.
template <Activation A, int32_t Deg, bool Mask>
ATTN_ROW_CLONES void elementwise_row_backward(const PhiParams& pp, float* s, float* dp, int64_t n, const float* mask) {
  const PhiParams p = pp;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j];
    float v = phi_fixed<A, Deg>(p, x, FastExp{});
    float g = dphi_fixed<A, Deg>(p, x, FastExp{});
    if constexpr (Mask) {
      v = mask[j] != 0.0f ? v : 0.0f;
      g = mask[j] != 0.0f ? g : 0.0f;
    }
    s[j] = v;
    dp[j] *= g;
  }
}

void zero(float* x, int64_t n) { std::fill(x, x + n, 0.0f); }

// ---- forward ------------------------------------------------------------------------

template <Activation A, int32_t Deg>
void forward_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K,
                  const float* V, const float* key_mask, float* O, float* lse, double* attn_fro,
                  double* jac_fro) {
  const int64_t BH = sh.B * sh.H, Nq = sh.Nq, Nk = sh.Nk, d = sh.d, dv = sh.dv;
  const int64_t kBlockRows = block_rows(Nk);
  const int64_t nblk = (Nq + kBlockRows - 1) / kBlockRows, ntasks = BH * nblk;
  const float scale = attention_score_scale(spec, sh);
  const bool norms = spec.collect_norms;
  const std::vector<int64_t> prefix = key_prefix_counts(sh, key_mask);
  std::vector<RowNormSq> part(norms ? static_cast<size_t>(ntasks) : 0);

  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), ntasks)));
  BlasSingleThreaded blas_guard(nthreads);
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> sbuf(static_cast<size_t>(kBlockRows * Nk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < ntasks; ++t) {
      const int64_t bh = t / nblk, b = bh / sh.H, i0 = (t % nblk) * kBlockRows;
      const int64_t m = std::min(kBlockRows, Nq - i0);
      const float* q = Q + (bh * Nq + i0) * d;
      const float* k = K + bh * Nk * d;
      const float* v = V + bh * Nk * dv;
      float* o = O + (bh * Nq + i0) * dv;
      float* lse_b = lse != nullptr ? lse + bh * Nq + i0 : nullptr;
      const float* mask = key_mask != nullptr ? key_mask + b * Nk : nullptr;
      const Visibility vis{Nq, Nk, spec.causal, mask, prefix.data() + b * (Nk + 1)};
      const int64_t jmax = vis.row_end(i0 + m - 1);  // row_end grows with i
      RowNormSq nrm;
      if (jmax == 0) {
        zero(o, m * dv);
        if (lse_b != nullptr) std::fill(lse_b, lse_b + m, -std::numeric_limits<float>::infinity());
      } else {
        float* S = sbuf.data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(jmax),
                    static_cast<int>(d), scale, q, static_cast<int>(d), k, static_cast<int>(d), 0.0f, S,
                    static_cast<int>(jmax));
        for (int64_t r = 0; r < m; ++r) {
          const int64_t i = i0 + r, je = vis.row_end(i), n = vis.n_keys(i);
          float* s = S + r * jmax;
          if (n == 0) {
            zero(s, jmax);
            if (lse_b != nullptr) lse_b[r] = -std::numeric_limits<float>::infinity();
            continue;
          }
          if constexpr (A == Activation::softmax) {
            float l;
            if (mask != nullptr) {
              l = norms ? softmax_row_forward<true, true>(s, je, mask, &nrm)
                        : softmax_row_forward<true, false>(s, je, mask, &nrm);
            } else {
              l = norms ? softmax_row_forward<false, true>(s, je, mask, &nrm)
                        : softmax_row_forward<false, false>(s, je, mask, &nrm);
            }
            if (lse_b != nullptr) lse_b[r] = l;
          } else {
            const PhiParams pp = resolve_phi(spec.act, n);
            if (mask != nullptr) {
              if (norms) elementwise_row_forward<A, Deg, true, true>(pp, s, je, mask, &nrm);
              else elementwise_row_forward<A, Deg, true, false>(pp, s, je, mask, &nrm);
            } else {
              if (norms) elementwise_row_forward<A, Deg, false, true>(pp, s, je, mask, &nrm);
              else elementwise_row_forward<A, Deg, false, false>(pp, s, je, mask, &nrm);
            }
          }
          zero(s + je, jmax - je);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(dv),
                    static_cast<int>(jmax), 1.0f, S, static_cast<int>(jmax), v, static_cast<int>(dv), 0.0f, o,
                    static_cast<int>(dv));
      }
      if (norms) part[static_cast<size_t>(t)] = nrm;
    }
  }
  if (norms) {
    // Fixed order: blocks of one head in sequence, whatever thread computed them.
    for (int64_t bh = 0; bh < BH; ++bh) {
      double a = 0.0, j = 0.0;
      for (int64_t blk = 0; blk < nblk; ++blk) {
        a += part[static_cast<size_t>(bh * nblk + blk)].attn;
        j += part[static_cast<size_t>(bh * nblk + blk)].jac;
      }
      attn_fro[bh] = std::sqrt(a);
      jac_fro[bh] = std::sqrt(j);
    }
  }
}

// ---- backward -----------------------------------------------------------------------

template <Activation A, int32_t Deg>
void backward_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K,
                   const float* V, const float* key_mask, const float* O, const float* dO, const float* lse,
                   float* dQ, float* dK, float* dV) {
  const int64_t BH = sh.B * sh.H, Nq = sh.Nq, Nk = sh.Nk, d = sh.d, dv = sh.dv;
  const int64_t kBlockRows = block_rows(Nk);
  const int64_t nblk = (Nq + kBlockRows - 1) / kBlockRows;
  const float scale = attention_score_scale(spec, sh);
  const std::vector<int64_t> prefix = key_prefix_counts(sh, key_mask);
  const int id = static_cast<int>(d), idv = static_cast<int>(dv);

  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), BH)));
  BlasSingleThreaded blas_guard(nthreads);
#pragma omp parallel num_threads(nthreads)
  {
    std::vector<float> sbuf(static_cast<size_t>(kBlockRows * Nk)), dpbuf(static_cast<size_t>(kBlockRows * Nk));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const int64_t b = bh / sh.H;
      const float* k = K + bh * Nk * d;
      const float* v = V + bh * Nk * dv;
      float* dk = dK + bh * Nk * d;
      float* dvv = dV + bh * Nk * dv;
      zero(dk, Nk * d);
      zero(dvv, Nk * dv);
      const float* mask = key_mask != nullptr ? key_mask + b * Nk : nullptr;
      const Visibility vis{Nq, Nk, spec.causal, mask, prefix.data() + b * (Nk + 1)};
      for (int64_t blk = 0; blk < nblk; ++blk) {
        const int64_t i0 = blk * kBlockRows, m = std::min(kBlockRows, Nq - i0);
        const int im = static_cast<int>(m);
        const float* q = Q + (bh * Nq + i0) * d;
        const float* dob = dO + (bh * Nq + i0) * dv;
        float* dq = dQ + (bh * Nq + i0) * d;
        const int64_t jmax = vis.row_end(i0 + m - 1);
        if (jmax == 0) {
          zero(dq, m * d);
          continue;
        }
        const int ij = static_cast<int>(jmax);
        float* S = sbuf.data();
        float* dP = dpbuf.data();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, ij, id, scale, q, id, k, id, 0.0f, S, ij);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, ij, idv, 1.0f, dob, idv, v, idv, 0.0f, dP, ij);
        for (int64_t r = 0; r < m; ++r) {
          const int64_t i = i0 + r, je = vis.row_end(i), n = vis.n_keys(i);
          float* s = S + r * jmax;
          float* dp = dP + r * jmax;
          if (n == 0) {
            zero(s, jmax);
            zero(dp, jmax);
            continue;
          }
          if constexpr (A == Activation::softmax) {
            // D_i = sum_j P_ij dP_ij = dO_i . O_i  (the softmax Jacobian's rank-one term)
            const float* oi = O + (bh * Nq + i) * dv;
            const float* doi = dob + r * dv;
            double D = 0.0;
            for (int64_t c = 0; c < dv; ++c) D += static_cast<double>(oi[c]) * doi[c];
            const float l = lse[bh * Nq + i];
            if (mask != nullptr) softmax_row_backward<true>(s, dp, je, mask, l, static_cast<float>(D));
            else softmax_row_backward<false>(s, dp, je, mask, l, static_cast<float>(D));
          } else {
            const PhiParams pp = resolve_phi(spec.act, n);
            if (mask != nullptr) elementwise_row_backward<A, Deg, true>(pp, s, dp, je, mask);
            else elementwise_row_backward<A, Deg, false>(pp, s, dp, je, mask);
          }
          zero(s + je, jmax - je);
          zero(dp + je, jmax - je);
        }
        // dV[0:jmax] += P^T dOb ; dQb = scale dS K ; dK[0:jmax] += scale dS^T Qb
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ij, idv, im, 1.0f, S, ij, dob, idv, 1.0f, dvv, idv);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, id, ij, scale, dP, ij, k, id, 0.0f, dq, id);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ij, id, im, scale, dP, ij, q, id, 1.0f, dk, id);
      }
    }
  }
}

// Calls f.template operator()<A, Deg>() with the activation (and poly degrees 1..4) as
// compile-time constants; Deg = 0 means the degree is read at run time.
template <class F>
void dispatch_activation(const ActivationSpec& act, F&& f) {
  switch (act.activation) {
    case Activation::softmax: f.template operator()<Activation::softmax, 0>(); return;
    case Activation::relu: f.template operator()<Activation::relu, 0>(); return;
    case Activation::sigmoid: f.template operator()<Activation::sigmoid, 0>(); return;
    case Activation::poly:
      switch (act.degree) {
        case 1: f.template operator()<Activation::poly, 1>(); return;
        case 2: f.template operator()<Activation::poly, 2>(); return;
        case 3: f.template operator()<Activation::poly, 3>(); return;
        case 4: f.template operator()<Activation::poly, 4>(); return;
        default: f.template operator()<Activation::poly, 0>(); return;
      }
  }
}

}  // namespace

void attention_forward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q,
                           const float* K, const float* V, const float* key_mask, float* O, float* lse,
                           double* attn_fro, double* jac_fro) {
  const int64_t BH = shape.B * shape.H;
  if (BH == 0 || shape.Nq == 0) return;
  if (shape.Nk == 0) {  // nothing to attend: every row outputs 0
    zero(O, BH * shape.Nq * shape.dv);
    if (lse != nullptr) std::fill(lse, lse + BH * shape.Nq, -std::numeric_limits<float>::infinity());
    if (spec.collect_norms) {
      std::fill(attn_fro, attn_fro + BH, 0.0);
      std::fill(jac_fro, jac_fro + BH, 0.0);
    }
    return;
  }
  dispatch_activation(spec.act, [&]<Activation A, int32_t Deg>() {
    forward_impl<A, Deg>(spec, shape, Q, K, V, key_mask, O, lse, attn_fro, jac_fro);
  });
}

void attention_backward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q,
                            const float* K, const float* V, const float* key_mask, const float* O,
                            const float* dO, const float* lse, float* dQ, float* dK, float* dV) {
  const int64_t BH = shape.B * shape.H;
  if (BH == 0) return;
  if (shape.Nq == 0 || shape.Nk == 0) {
    zero(dQ, BH * shape.Nq * shape.d);
    zero(dK, BH * shape.Nk * shape.d);
    zero(dV, BH * shape.Nk * shape.dv);
    return;
  }
  dispatch_activation(spec.act, [&]<Activation A, int32_t Deg>() {
    backward_impl<A, Deg>(spec, shape, Q, K, V, key_mask, O, dO, lse, dQ, dK, dV);
  });
}

}  // namespace attnsweep
