// CPU attention: blocked over query rows (block_rows(Nk) at a time, 16..256), GEMMs for
// the products, and one fused pass over each block of scores that applies phi (or
// softmax) and accumulates the norm sums (forward) or forms dS (backward). OpenMP over
// (batch item, head, query block) in the forward and over (batch item, head) in the
// backward, where dK and dV accumulate over the query blocks of one head.
// About 1020 lines: the row passes of every activation (fused softmax, element-wise phi,
// masks, norms) are templates instantiated by one dispatch here, so they stay in one
// translation unit with the blocked loops that call them.
// The GEMMs: with AVX-512 (own_gemms), the tiles of kernels/cpu/gemm.cpp, K and V packed
// once per head (scale folded into K) and the [m, jmax] score blocks read in place; else
// OpenBLAS, which repacks K and V for every block and copies every score block again
// (its packing was ~17 % of the time at N = 1024, a zero-filled buffer per call ~4 %).
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
#include "kernels/cpu/aligned_scratch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vec.h"
#include "kernels/cpu/vec512.h"

#include <cblas.h>
// GCC 12 warns inside the AVX-512 headers (their _mm512_undefined_* self-initialisation)
// when these intrinsics are inlined into target("avx512f") functions: a false positive.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
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

// clang does not clone function templates; it (the fuzz build, tests/fuzz/) compiles the
// default path only.
#if defined(__clang__)
#define ATTN_ROW_CLONES
#else
#define ATTN_ROW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif

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
ATTN_ROW_CLONES void elementwise_row_forward(const PhiParams& pp, float* s, int64_t n, const float* mask,
                                             RowNormSq* nrm) {
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

void zero(float* x, int64_t n) {
  std::fill(x, x + n, 0.0f);
}

// Whether the general path takes our AVX-512 GEMM tiles (kernels/cpu/gemm.h) for its
// products: every product's depth and width within what they serve (and the GEMM path
// not switched to OpenBLAS); otherwise OpenBLAS.
bool own_gemms(const AttentionShape& sh) {
  return cpu::gemm_avx512_usable(sh.d, sh.Nk) && cpu::gemm_avx512_usable(sh.Nk, sh.dv) &&
         cpu::gemm_avx512_usable(sh.dv, sh.Nk) && cpu::gemm_avx512_usable(sh.Nk, sh.d);
}

// ---- forward ------------------------------------------------------------------------

// One row of scores s[0, je) -> phi(s) in place (n visible keys), the norm sums added to
// *nrm when norms; returns the row's log-sum-exp (softmax; else 0).
template <Activation A, int32_t Deg>
[[gnu::always_inline]] inline float row_forward(const ActivationSpec& act, int64_t n, float* s, int64_t je,
                                                const float* mask, bool norms, RowNormSq* nrm) {
  if constexpr (A == Activation::softmax) {
    if (mask != nullptr)
      return norms ? softmax_row_forward<true, true>(s, je, mask, nrm)
                   : softmax_row_forward<true, false>(s, je, mask, nrm);
    return norms ? softmax_row_forward<false, true>(s, je, mask, nrm)
                 : softmax_row_forward<false, false>(s, je, mask, nrm);
  } else {
    const PhiParams pp = resolve_phi(act, n);
    if (mask != nullptr) {
      if (norms)
        elementwise_row_forward<A, Deg, true, true>(pp, s, je, mask, nrm);
      else
        elementwise_row_forward<A, Deg, true, false>(pp, s, je, mask, nrm);
    } else {
      if (norms)
        elementwise_row_forward<A, Deg, false, true>(pp, s, je, mask, nrm);
      else
        elementwise_row_forward<A, Deg, false, false>(pp, s, je, mask, nrm);
    }
    return 0.0f;
  }
}

// attn_fro, jac_fro (BH) from the per-task sums, in a fixed order: the blocks of one head
// in sequence, whatever thread computed them.
void sum_norm_parts(const std::vector<RowNormSq>& part, int64_t BH, int64_t nblk, double* attn_fro, double* jac_fro) {
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

template <Activation A, int32_t Deg>
void forward_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K, const float* V,
                  const float* key_mask, float* O, float* lse, double* attn_fro, double* jac_fro) {
  const int64_t BH = sh.B * sh.H, Nq = sh.Nq, Nk = sh.Nk, d = sh.d, dv = sh.dv;
  const int64_t kBlockRows = block_rows(Nk);
  const int64_t nblk = (Nq + kBlockRows - 1) / kBlockRows, ntasks = BH * nblk;
  const float scale = attention_score_scale(spec, sh);
  const bool norms = spec.collect_norms;
  const std::vector<int64_t> prefix = key_prefix_counts(sh, key_mask);
  std::vector<RowNormSq> part(norms ? static_cast<size_t>(ntasks) : 0);

  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), ntasks)));
  BlasSingleThreaded blas_guard(nthreads);
  // AVX-512: our GEMM tiles instead of OpenBLAS, with scale K^T and V packed once per
  // head here (OpenBLAS repacks them for every block, and packs the [m, Nk] P too).
  const bool own = own_gemms(sh);
  const int64_t ktp_n = own ? cpu::panels_floats(d, Nk) : 0, vp_n = own ? cpu::panels_floats(Nk, dv) : 0;
  thread_local AlignedScratch packed_buf;
  float* packed = own ? packed_buf.get(static_cast<size_t>(BH * (ktp_n + vp_n))) : nullptr;
  if (own) {
#pragma omp parallel for schedule(static) num_threads(nthreads)
    for (int64_t bh = 0; bh < BH; ++bh) {
      float* pk = packed + bh * (ktp_n + vp_n);
      cpu::pack_panels(pk, K + bh * Nk * d, 1, d, d, Nk, scale);            // scale K^T (d x Nk)
      cpu::pack_panels(pk + ktp_n, V + bh * Nk * dv, dv, 1, Nk, dv, 1.0f);  // V (Nk x dv)
    }
  }
#pragma omp parallel num_threads(nthreads)
  {
    thread_local AlignedScratch sbuf_t;
    float* sbuf = sbuf_t.get(static_cast<size_t>(kBlockRows * Nk));
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
        float* S = sbuf;
        const float* pk = own ? packed + bh * (ktp_n + vp_n) : nullptr;
        if (own)
          cpu::gemm_rows_panels(S, jmax, q, d, pk, d, d, jmax, m, false);
        else
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
          const float l = row_forward<A, Deg>(spec.act, n, s, je, mask, norms, &nrm);
          if constexpr (A == Activation::softmax)
            if (lse_b != nullptr) lse_b[r] = l;
          zero(s + je, jmax - je);
        }
        if (own)
          cpu::gemm_rows_panels(o, dv, S, jmax, pk + ktp_n, Nk, jmax, dv, m, false);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(dv),
                      static_cast<int>(jmax), 1.0f, S, static_cast<int>(jmax), v, static_cast<int>(dv), 0.0f, o,
                      static_cast<int>(dv));
      }
      if (norms) part[static_cast<size_t>(t)] = nrm;
    }
  }
  if (norms) sum_norm_parts(part, BH, nblk, attn_fro, jac_fro);
}

// ---- backward -----------------------------------------------------------------------

// One row: s[0, je) (the scores) and dp (dP) -> dS in dp. Softmax reads the row's lse and
// its output oi and gradient doi (dv each) for D_i = sum_j P_ij dP_ij = dO_i . O_i (the
// softmax Jacobian's rank-one term).
template <Activation A, int32_t Deg>
[[gnu::always_inline]] inline void row_backward(const ActivationSpec& act, int64_t n, float* s, float* dp, int64_t je,
                                                const float* mask, const float* oi, const float* doi, int64_t dv,
                                                float lse) {
  if constexpr (A == Activation::softmax) {
    double D = 0.0;
    for (int64_t c = 0; c < dv; ++c) D += static_cast<double>(oi[c]) * doi[c];
    if (mask != nullptr)
      softmax_row_backward<true>(s, dp, je, mask, lse, static_cast<float>(D));
    else
      softmax_row_backward<false>(s, dp, je, mask, lse, static_cast<float>(D));
  } else {
    const PhiParams pp = resolve_phi(act, n);
    if (mask != nullptr)
      elementwise_row_backward<A, Deg, true>(pp, s, dp, je, mask);
    else
      elementwise_row_backward<A, Deg, false>(pp, s, dp, je, mask);
  }
}

template <Activation A, int32_t Deg>
void backward_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* Q, const float* K, const float* V,
                   const float* key_mask, const float* O, const float* dO, const float* lse, float* dQ, float* dK,
                   float* dV) {
  const int64_t BH = sh.B * sh.H, Nq = sh.Nq, Nk = sh.Nk, d = sh.d, dv = sh.dv;
  const int64_t kBlockRows = block_rows(Nk);
  const int64_t nblk = (Nq + kBlockRows - 1) / kBlockRows;
  const float scale = attention_score_scale(spec, sh);
  const std::vector<int64_t> prefix = key_prefix_counts(sh, key_mask);
  const int id = static_cast<int>(d), idv = static_cast<int>(dv);

  const int nthreads = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), BH)));
  BlasSingleThreaded blas_guard(nthreads);
  const bool own = own_gemms(sh);  // as in the forward; the head's operands packed per task
  const int64_t ktp_n = own ? cpu::panels_floats(d, Nk) : 0, vtp_n = own ? cpu::panels_floats(dv, Nk) : 0,
                kp_n = own ? cpu::panels_floats(Nk, d) : 0;
#pragma omp parallel num_threads(nthreads)
  {
    thread_local AlignedScratch sbuf_t, dpbuf_t, packed_t, qs_t;
    float* sbuf = sbuf_t.get(static_cast<size_t>(kBlockRows * Nk));
    float* dpbuf = dpbuf_t.get(static_cast<size_t>(kBlockRows * Nk));
    float* ktp = own ? packed_t.get(static_cast<size_t>(ktp_n + vtp_n + kp_n)) : nullptr;
    float* vtp = own ? ktp + ktp_n : nullptr;
    float* kp = own ? vtp + vtp_n : nullptr;
    float* qs = own ? qs_t.get(static_cast<size_t>(kBlockRows * d)) : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh) {
      const int64_t b = bh / sh.H;
      const float* k = K + bh * Nk * d;
      const float* v = V + bh * Nk * dv;
      float* dk = dK + bh * Nk * d;
      float* dvv = dV + bh * Nk * dv;
      zero(dk, Nk * d);
      zero(dvv, Nk * dv);
      if (own) {
        cpu::pack_panels(ktp, k, 1, d, d, Nk, scale);   // scale K^T (d x Nk): S
        cpu::pack_panels(vtp, v, 1, dv, dv, Nk, 1.0f);  // V^T (dv x Nk): dP = dO V^T
        cpu::pack_panels(kp, k, d, 1, Nk, d, scale);    // scale K (Nk x d): dQ = dS (scale K)
      }
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
        float* S = sbuf;
        float* dP = dpbuf;
        if (own) {
          cpu::gemm_rows_panels(S, jmax, q, d, ktp, d, d, jmax, m, false);
          cpu::gemm_rows_panels(dP, jmax, dob, dv, vtp, dv, dv, jmax, m, false);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, ij, id, scale, q, id, k, id, 0.0f, S, ij);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, im, ij, idv, 1.0f, dob, idv, v, idv, 0.0f, dP, ij);
        }
        for (int64_t r = 0; r < m; ++r) {
          const int64_t i = i0 + r, je = vis.row_end(i), n = vis.n_keys(i);
          float* s = S + r * jmax;
          float* dp = dP + r * jmax;
          if (n == 0) {
            zero(s, jmax);
            zero(dp, jmax);
            continue;
          }
          row_backward<A, Deg>(spec.act, n, s, dp, je, mask, O + (bh * Nq + i) * dv, dob + r * dv, dv,
                               lse != nullptr ? lse[bh * Nq + i] : 0.0f);
          zero(s + je, jmax - je);
          zero(dp + je, jmax - je);
        }
        // dV[0:jmax] += P^T dOb ; dQb = scale dS K ; dK[0:jmax] += scale dS^T Qb
        if (own) {
          for (int64_t e = 0; e < m * d; ++e) qs[e] = scale * q[e];
          cpu::gemm_at_b_add(dvv, dv, S, jmax, dob, dv, m, jmax, dv);
          cpu::gemm_rows_panels(dq, d, dP, jmax, kp, Nk, jmax, d, m, false);
          cpu::gemm_at_b_add(dk, d, dP, jmax, qs, d, m, jmax, d);
        } else {
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ij, idv, im, 1.0f, S, ij, dob, idv, 1.0f, dvv, idv);
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, id, ij, scale, dP, ij, k, id, 0.0f, dq, id);
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ij, id, im, scale, dP, ij, q, id, 1.0f, dk, id);
        }
      }
    }
  }
}

// Calls f.template operator()<A, Deg>() through the registry's dispatch
// (kernels/activation.h: Deg = 0 means the degree is read at run time).
template <class F>
void dispatch_phi(const ActivationSpec& act, F&& f) {
  dispatch_activation(act,
                      [&](auto a, auto deg) { f.template operator()<decltype(a)::value, decltype(deg)::value>(); });
}

// ---- packed small-head self-attention (AVX-512) ---------------------------------------
// The trainer's layout (kernels/attention.h, attention_*_packed_cpu): per (b, h), Q, K, V
// are read in place from the fused projection output, O / dO are rows of the merged
// (B, T, C) buffer and dQ, dK, dV are written straight into dqkv: no head split / merge
// copies, and no SGEMM calls (OpenBLAS costs more per call than these 16-deep products).
// One thread does one (b, h) from start to end, every sum in a fixed order: the results
// do not depend on the thread count.
//   S  = scale Q K^T: K transposed once into Kt [16][ld] (ld = T rounded up to 16, zero
//        padded), then 4 query rows x 4 key vectors of 16 per register tile;
//   P  = phi(S) row by row (softmax: the AVX-512 pass below; element-wise: the row
//        passes above), O = P V with 8 query rows per tile, V rows broadcast-multiplied;
//   backward: dP = dO V^T as S; dS; dV = P^T dO and dK = scale dS^T Q with 8 keys per
//        tile, dQ = scale dS K with 8 query rows per tile.

#define PACKED_AVX512 __attribute__((target("avx512f")))

namespace packed {

constexpr int64_t kD = 16;      // head width this path serves
constexpr int64_t kMaxT = 256;  // longest sequence (S and dP of one head stay in L2)

using Buf = AlignedScratch;  // kernels/cpu/aligned_scratch.h

struct Work {
  Buf kt, vt, s, dp;
};
Work& work() {
  thread_local Work w;
  return w;
}

inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u);
}

// exp of 16 lanes, 0 below -87.33 as cpu::fast_expf (kernels/cpu/vec512.h).
PACKED_AVX512 inline __m512 exp16(__m512 x) {
  return cpu::exp_or_zero16(x);
}

// dst [16][ld] = the transpose of rows src[j * lds + c] (j < T, c < 16), zero for j >= T.
PACKED_AVX512 void transpose16(float* dst, int64_t ld, const float* src, int64_t lds, int64_t T) {
  for (int64_t j0 = 0; j0 < ld; j0 += 16) {
    __m512 r[16], t[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) r[i] = j0 + i < T ? _mm512_loadu_ps(src + (j0 + i) * lds) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
      t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
      const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
      r[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      r[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      r[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      r[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    // r[4 g + k], 128-bit lane L: rows 4g .. 4g+3 of column 4 L + k.
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m512 v0 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0x88), v1 = _mm512_shuffle_f32x4(r[k], r[4 + k], 0xDD);
      const __m512 w0 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0x88);
      const __m512 w1 = _mm512_shuffle_f32x4(r[8 + k], r[12 + k], 0xDD);
      _mm512_storeu_ps(dst + (0 + k) * ld + j0, _mm512_shuffle_f32x4(v0, w0, 0x88));
      _mm512_storeu_ps(dst + (4 + k) * ld + j0, _mm512_shuffle_f32x4(v1, w1, 0x88));
      _mm512_storeu_ps(dst + (8 + k) * ld + j0, _mm512_shuffle_f32x4(v0, w0, 0xDD));
      _mm512_storeu_ps(dst + (12 + k) * ld + j0, _mm512_shuffle_f32x4(v1, w1, 0xDD));
    }
  }
}

// out[r][j0 .. j0 + 16 NV) = scale * sum_c a[r * lda + c] * bt[c][j0 ..], r < MR: the
// scores of MR rows against NV vectors of keys (bt: a transpose from transpose16).
template <int MR, int NV>
PACKED_AVX512 void dot_tile(float* out, int64_t ldo, const float* a, int64_t lda, const float* bt, int64_t ldb,
                            float scale) {
  __m512 acc[MR][NV];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 16
  for (int c = 0; c < kD; ++c) {
    __m512 b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = _mm512_load_ps(bt + c * ldb + 16 * v);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + c]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, b[v], acc[r][v]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_store_ps(out + r * ldo + 16 * v, _mm512_mul_ps(acc[r][v], sc));
}

template <int MR>
PACKED_AVX512 void dot_rows(float* out, int64_t ldo, const float* a, int64_t lda, const float* bt, int64_t ldb,
                            float scale) {
  int64_t j0 = 0;
  for (; j0 + 64 <= ldb; j0 += 64) dot_tile<MR, 4>(out + j0, ldo, a, lda, bt + j0, ldb, scale);
  switch ((ldb - j0) / 16) {
    case 3: dot_tile<MR, 3>(out + j0, ldo, a, lda, bt + j0, ldb, scale); break;
    case 2: dot_tile<MR, 2>(out + j0, ldo, a, lda, bt + j0, ldb, scale); break;
    case 1: dot_tile<MR, 1>(out + j0, ldo, a, lda, bt + j0, ldb, scale); break;
    default: break;
  }
}

// out (T rows, ld apart) = scale * A (T rows of 16, lda apart) Bt, Bt [16][ld].
PACKED_AVX512 void dot_all(float* out, int64_t ld, const float* a, int64_t lda, const float* bt, int64_t T,
                           float scale) {
  int64_t i = 0;
  for (; i + 4 <= T; i += 4) dot_rows<4>(out + i * ld, ld, a + i * lda, lda, bt, ld, scale);
  for (; i < T; ++i) dot_rows<1>(out + i * ld, ld, a + i * lda, lda, bt, ld, scale);
}

// out[r] (16 floats, ldo apart) = scale * sum_{t < n} w[r * wr + t * wt] * x[t * ldx], r < MR:
// MR weighted sums of the 16-float rows of x (one FMA chain per output row, t in order).
template <int MR>
PACKED_AVX512 void comb_tile(float* out, int64_t ldo, const float* w, int64_t wr, int64_t wt, const float* x,
                             int64_t ldx, int64_t n, float scale) {
  __m512 acc[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t t = 0; t < n; ++t) {
    const __m512 xv = _mm512_loadu_ps(x + t * ldx);
    const float* wv = w + t * wt;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(wv[r * wr]), xv, acc[r]);
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) _mm512_storeu_ps(out + r * ldo, scale == 1.0f ? acc[r] : _mm512_mul_ps(acc[r], sc));
}

// All `rows` outputs of comb_tile, 8 at a time.
PACKED_AVX512 void comb_all(float* out, int64_t ldo, const float* w, int64_t wr, int64_t wt, const float* x,
                            int64_t ldx, int64_t rows, int64_t n, float scale) {
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) comb_tile<8>(out + r0 * ldo, ldo, w + r0 * wr, wr, wt, x, ldx, n, scale);
  float* o = out + r0 * ldo;
  const float* ww = w + r0 * wr;
  switch (rows - r0) {
    case 7: comb_tile<7>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 6: comb_tile<6>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 5: comb_tile<5>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 4: comb_tile<4>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 3: comb_tile<3>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 2: comb_tile<2>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    case 1: comb_tile<1>(o, ldo, ww, wr, wt, x, ldx, n, scale); break;
    default: break;
  }
}

// Float64 sums of the 16 lanes' e, e^2, e^3 into z, a2, a3 (8 lanes each).
PACKED_AVX512 inline void add_sums(__m512 e, __m512d& z, __m512d& a2, __m512d& a3) {
  const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
  const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
  z = _mm512_add_pd(z, _mm512_add_pd(lo, hi));
  const __m512d l2 = _mm512_mul_pd(lo, lo), h2 = _mm512_mul_pd(hi, hi);
  a2 = _mm512_add_pd(a2, _mm512_add_pd(l2, h2));
  a3 = _mm512_add_pd(a3, _mm512_add_pd(_mm512_mul_pd(l2, lo), _mm512_mul_pd(h2, hi)));
}

// softmax_row for rows of up to 64 keys (NV vectors), the row held in registers: one
// load and one store per vector instead of three passes.
template <int NV>
PACKED_AVX512 float softmax_row_regs(float* s, int64_t n, RowNormSq* nrm) {
  const __mmask16 last = tail_mask(n - 16 * (NV - 1));
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 x[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) x[v] = _mm512_mask_loadu_ps(ninf, v + 1 < NV ? __mmask16(0xFFFF) : last, s + 16 * v);
  __m512 mx = x[0];
#pragma GCC unroll 4
  for (int v = 1; v < NV; ++v) mx = _mm512_max_ps(mx, x[v]);
  const float m = _mm512_reduce_max_ps(mx);
  const __m512 mv = _mm512_set1_ps(m);
  __m512d z = _mm512_setzero_pd(), a2 = z, a3 = z;
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    x[v] = _mm512_maskz_mov_ps(v + 1 < NV ? __mmask16(0xFFFF) : last, exp16(_mm512_sub_ps(x[v], mv)));
    add_sums(x[v], z, a2, a3);
  }
  const double zd = _mm512_reduce_add_pd(z);
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / zd));
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) _mm512_store_ps(s + 16 * v, _mm512_mul_ps(x[v], inv));
  const RowNormSq r = softmax_row_norms_from_sums(zd, _mm512_reduce_add_pd(a2), _mm512_reduce_add_pd(a3));
  nrm->attn += r.attn;
  nrm->jac += r.jac;
  return m + std::log(static_cast<float>(zd));  // logf: libm's double log showed at ~1%
}

// Softmax of s[0, n) in place (lanes n .. 16 ceil(n/16) set to 0) with the row's norms
// (the steps that collect them; softmax_rows16 below serves the others); returns the lse
// and adds the norms to nrm.
PACKED_AVX512 float softmax_row(float* s, int64_t n, RowNormSq* nrm) {
  const int64_t nv = (n + 15) / 16;
  switch (nv) {
    case 1: return softmax_row_regs<1>(s, n, nrm);
    case 2: return softmax_row_regs<2>(s, n, nrm);
    case 3: return softmax_row_regs<3>(s, n, nrm);
    case 4: return softmax_row_regs<4>(s, n, nrm);
    default: break;
  }
  const __mmask16 last = tail_mask(n - 16 * (nv - 1));
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  for (int64_t v = 0; v < nv; ++v)
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, v + 1 < nv ? __mmask16(0xFFFF) : last, s + 16 * v));
  const float m = _mm512_reduce_max_ps(mx);
  const __m512 mv = _mm512_set1_ps(m);
  __m512d z = _mm512_setzero_pd(), a2 = z, a3 = z;
  for (int64_t v = 0; v < nv; ++v) {
    const __mmask16 k = v + 1 < nv ? __mmask16(0xFFFF) : last;
    const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_load_ps(s + 16 * v), mv)));
    _mm512_store_ps(s + 16 * v, e);
    add_sums(e, z, a2, a3);
  }
  const double zs = _mm512_reduce_add_pd(z);
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / zs));
  for (int64_t v = 0; v < nv; ++v) _mm512_store_ps(s + 16 * v, _mm512_mul_ps(_mm512_load_ps(s + 16 * v), inv));
  const RowNormSq r = softmax_row_norms_from_sums(zs, _mm512_reduce_add_pd(a2), _mm512_reduce_add_pd(a3));
  nrm->attn += r.attn;
  nrm->jac += r.jac;
  return m + static_cast<float>(std::log(zs));
}

// The lane-wise sums (Max: maxima) of 16 vectors, v[r] -> lane r of the result: four
// levels of pairing even and odd lanes of two vectors (lanes 0-7 from the first, 8-15
// from the second), 15 pairings instead of 16 separate horizontal reductions.
// One level: v[k] = pair(v[2k], v[2k+1]), k < N / 2 (N a constant: the loop unrolls).
template <bool Max, int N>
PACKED_AVX512 inline void reduce_level(__m512* v, __m512i ev, __m512i od) {
  for (int k = 0; k < N / 2; ++k) {
    const __m512 e = _mm512_permutex2var_ps(v[2 * k], ev, v[2 * k + 1]);
    const __m512 o = _mm512_permutex2var_ps(v[2 * k], od, v[2 * k + 1]);
    v[k] = Max ? _mm512_max_ps(e, o) : _mm512_add_ps(e, o);
  }
}

template <bool Max>
PACKED_AVX512 inline __m512 reduce16(__m512* v) {
  const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i od = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  reduce_level<Max, 16>(v, ev, od);
  reduce_level<Max, 8>(v, ev, od);
  reduce_level<Max, 4>(v, ev, od);
  reduce_level<Max, 2>(v, ev, od);
  return v[0];
}

// Softmax of the T rows of S (ld apart, lanes T .. ld set to 0) in place, 16 rows at a
// time, without norms (the training steps that log none): the rows' maxima and sums are
// formed as vertical maxima / sums of their vectors, then reduce16 across the 16 rows
// (float32 sums, a tree: relative error ~6u). lse (may be null) = max + log(sum).
PACKED_AVX512 void softmax_rows16(float* S, int64_t ld, int64_t T, float* lse) {
  const int64_t nv = (T + 15) / 16;
  const __mmask16 last = tail_mask(T - 16 * (nv - 1));
  const __m512 ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  alignas(64) float mrow[16], zrow[16], irow[16];
  for (int64_t i0 = 0; i0 < T; i0 += 16) {
    const int64_t nr = std::min<int64_t>(16, T - i0);
    __m512 v[16];
    for (int64_t r = 0; r < 16; ++r) {
      if (r >= nr) {
        v[r] = ninf;
        continue;
      }
      const float* s = S + (i0 + r) * ld;
      __m512 mx = ninf;
      for (int64_t j = 0; j < nv; ++j)
        mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(ninf, j + 1 < nv ? __mmask16(0xFFFF) : last, s + 16 * j));
      v[r] = mx;
    }
    _mm512_store_ps(mrow, reduce16<true>(v));
    for (int64_t r = 0; r < 16; ++r) {
      if (r >= nr) {
        v[r] = _mm512_setzero_ps();
        continue;
      }
      float* s = S + (i0 + r) * ld;
      const __m512 mv = _mm512_set1_ps(mrow[r]);
      __m512 z = _mm512_setzero_ps();
      for (int64_t j = 0; j < nv; ++j) {
        const __mmask16 k = j + 1 < nv ? __mmask16(0xFFFF) : last;
        const __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_load_ps(s + 16 * j), mv)));
        _mm512_store_ps(s + 16 * j, e);
        z = _mm512_add_ps(z, e);
      }
      v[r] = z;
    }
    const __m512 zs = reduce16<false>(v);
    _mm512_store_ps(zrow, zs);
    _mm512_store_ps(irow, _mm512_div_ps(_mm512_set1_ps(1.0f), zs));
    for (int64_t r = 0; r < nr; ++r) {
      float* s = S + (i0 + r) * ld;
      const __m512 iv = _mm512_set1_ps(irow[r]);
      for (int64_t j = 0; j < nv; ++j) _mm512_store_ps(s + 16 * j, _mm512_mul_ps(_mm512_load_ps(s + 16 * j), iv));
      if (lse != nullptr) lse[i0 + r] = mrow[r] + std::log(zrow[r]);
    }
  }
}

// Softmax backward of one row: s (scores) -> P = exp(s - lse), dp (dP) -> P (dP - D).
PACKED_AVX512 void softmax_row_bwd(float* s, float* dp, int64_t n, float lse, float D) {
  const int64_t nv = (n + 15) / 16;
  const __mmask16 last = tail_mask(n - 16 * (nv - 1));
  const __m512 l = _mm512_set1_ps(lse), dd = _mm512_set1_ps(D);
  for (int64_t v = 0; v < nv; ++v) {
    const __mmask16 k = v + 1 < nv ? __mmask16(0xFFFF) : last;
    const __m512 p = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_load_ps(s + 16 * v), l)));
    _mm512_store_ps(s + 16 * v, p);
    _mm512_store_ps(dp + 16 * v, _mm512_mul_ps(p, _mm512_sub_ps(_mm512_load_ps(dp + 16 * v), dd)));
  }
}

// sum_c a[c] b[c] over 16 floats, in float64.
PACKED_AVX512 inline double dot16(const float* a, const float* b) {
  const __m512 x = _mm512_loadu_ps(a), y = _mm512_loadu_ps(b);
  const __m512d xl = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
  const __m512d xh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  const __m512d yl = _mm512_cvtps_pd(_mm512_castps512_ps256(y));
  const __m512d yh = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(y), 1)));
  return _mm512_reduce_add_pd(_mm512_fmadd_pd(xh, yh, _mm512_mul_pd(xl, yl)));
}

inline int64_t padded(int64_t T) {
  return (T + 15) / 16 * 16;
}

// The forward of one (b, h): bh = b H + h.
template <Activation A, int32_t Deg>
void forward_packed_one(const AttentionSpec& spec, const AttentionShape& sh, const PhiParams& pp, float scale,
                        int64_t bh, const float* qkv, float* O, float* lse, double* attn_fro, double* jac_fro) {
  const int64_t H = sh.H, T = sh.Nq, C = H * kD, ld = padded(T);
  const bool norms = spec.collect_norms;
  {
    const int64_t b = bh / H, h = bh % H;
    Work& w = work();
    float* kt = w.kt.get(static_cast<size_t>(kD * ld));
    float* S = w.s.get(static_cast<size_t>(T * ld));
    const float* q = qkv + b * T * 3 * C + h * kD;
    const float* k = q + C;
    const float* v = q + 2 * C;
    transpose16(kt, ld, k, 3 * C, T);
    dot_all(S, ld, q, 3 * C, kt, T, scale);
    RowNormSq nrm;
    if constexpr (A == Activation::softmax) {
      if (!norms) {
        softmax_rows16(S, ld, T, lse != nullptr ? lse + bh * T : nullptr);
      } else {
        for (int64_t i = 0; i < T; ++i) {
          const float l = softmax_row(S + i * ld, T, &nrm);
          if (lse != nullptr) lse[bh * T + i] = l;
        }
      }
    } else {
      for (int64_t i = 0; i < T; ++i) {
        if (norms)
          elementwise_row_forward<A, Deg, false, true>(pp, S + i * ld, T, nullptr, &nrm);
        else
          elementwise_row_forward<A, Deg, false, false>(pp, S + i * ld, T, nullptr, &nrm);
      }
    }
    comb_all(O + b * T * C + h * kD, C, S, ld, 1, v, 3 * C, T, T, 1.0f);
    if (norms) {
      attn_fro[bh] = std::sqrt(nrm.attn);
      jac_fro[bh] = std::sqrt(nrm.jac);
    }
  }
}

template <Activation A, int32_t Deg>
void forward_packed_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* qkv, float* O, float* lse,
                         double* attn_fro, double* jac_fro) {
  const float scale = attention_score_scale(spec, sh);
  const PhiParams pp = resolve_phi(spec.act, sh.Nq);
  const int64_t BH = sh.B * sh.H;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t bh = 0; bh < BH; ++bh)
    forward_packed_one<A, Deg>(spec, sh, pp, scale, bh, qkv, O, lse, attn_fro, jac_fro);
}

// Batch items [b0, b1), every head, on the calling thread.
template <Activation A, int32_t Deg>
void forward_packed_samples(const AttentionSpec& spec, const AttentionShape& sh, const float* qkv, float* O, float* lse,
                            double* attn_fro, double* jac_fro, int64_t b0, int64_t b1) {
  const float scale = attention_score_scale(spec, sh);
  const PhiParams pp = resolve_phi(spec.act, sh.Nq);
  for (int64_t bh = b0 * sh.H; bh < b1 * sh.H; ++bh)
    forward_packed_one<A, Deg>(spec, sh, pp, scale, bh, qkv, O, lse, attn_fro, jac_fro);
}

// The backward of one (b, h).
template <Activation A, int32_t Deg>
void backward_packed_one(const AttentionShape& sh, const PhiParams& pp, float scale, int64_t bh, const float* qkv,
                         const float* O, const float* dO, const float* lse, float* dqkv) {
  const int64_t H = sh.H, T = sh.Nq, C = H * kD, ld = padded(T);
  {
    const int64_t b = bh / H, h = bh % H;
    Work& w = work();
    float* kt = w.kt.get(static_cast<size_t>(kD * ld));
    float* vt = w.vt.get(static_cast<size_t>(kD * ld));
    float* S = w.s.get(static_cast<size_t>(T * ld));
    float* dP = w.dp.get(static_cast<size_t>(T * ld));
    const int64_t row0 = b * T;
    const float* q = qkv + row0 * 3 * C + h * kD;
    const float* k = q + C;
    const float* v = q + 2 * C;
    const float* o = O + row0 * C + h * kD;
    const float* dob = dO + row0 * C + h * kD;
    float* dq = dqkv + row0 * 3 * C + h * kD;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    transpose16(kt, ld, k, 3 * C, T);
    transpose16(vt, ld, v, 3 * C, T);
    dot_all(S, ld, q, 3 * C, kt, T, scale);
    dot_all(dP, ld, dob, C, vt, T, 1.0f);
    for (int64_t i = 0; i < T; ++i) {
      float* s = S + i * ld;
      float* dp = dP + i * ld;
      if constexpr (A == Activation::softmax) {
        // D_i = sum_j P_ij dP_ij = dO_i . O_i
        const double D = dot16(o + i * C, dob + i * C);
        softmax_row_bwd(s, dp, T, lse[bh * T + i], static_cast<float>(D));
      } else {
        elementwise_row_backward<A, Deg, false>(pp, s, dp, T, nullptr);
      }
    }
    // dV = P^T dO, dQ = scale dS K, dK = scale dS^T Q
    comb_all(dv, 3 * C, S, 1, ld, dob, C, T, T, 1.0f);
    comb_all(dq, 3 * C, dP, ld, 1, k, 3 * C, T, T, scale);
    comb_all(dk, 3 * C, dP, 1, ld, q, 3 * C, T, T, scale);
  }
}

template <Activation A, int32_t Deg>
void backward_packed_impl(const AttentionSpec& spec, const AttentionShape& sh, const float* qkv, const float* O,
                          const float* dO, const float* lse, float* dqkv) {
  const float scale = attention_score_scale(spec, sh);
  const PhiParams pp = resolve_phi(spec.act, sh.Nq);
  const int64_t BH = sh.B * sh.H;
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t bh = 0; bh < BH; ++bh) backward_packed_one<A, Deg>(sh, pp, scale, bh, qkv, O, dO, lse, dqkv);
}

template <Activation A, int32_t Deg>
void backward_packed_samples(const AttentionSpec& spec, const AttentionShape& sh, const float* qkv, const float* O,
                             const float* dO, const float* lse, float* dqkv, int64_t b0, int64_t b1) {
  const float scale = attention_score_scale(spec, sh);
  const PhiParams pp = resolve_phi(spec.act, sh.Nq);
  for (int64_t bh = b0 * sh.H; bh < b1 * sh.H; ++bh)
    backward_packed_one<A, Deg>(sh, pp, scale, bh, qkv, O, dO, lse, dqkv);
}

}  // namespace packed

}  // namespace

void attention_forward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                           const float* V, const float* key_mask, float* O, float* lse, double* attn_fro,
                           double* jac_fro) {
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
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    forward_impl<A, Deg>(spec, shape, Q, K, V, key_mask, O, lse, attn_fro, jac_fro);
  });
}

void attention_backward_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* Q, const float* K,
                            const float* V, const float* key_mask, const float* O, const float* dO, const float* lse,
                            float* dQ, float* dK, float* dV) {
  const int64_t BH = shape.B * shape.H;
  if (BH == 0) return;
  if (shape.Nq == 0 || shape.Nk == 0) {
    zero(dQ, BH * shape.Nq * shape.d);
    zero(dK, BH * shape.Nk * shape.d);
    zero(dV, BH * shape.Nk * shape.dv);
    return;
  }
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    backward_impl<A, Deg>(spec, shape, Q, K, V, key_mask, O, dO, lse, dQ, dK, dV);
  });
}

}  // namespace attnsweep

namespace attnsweep {

bool attention_packed_cpu_usable(const AttentionSpec& spec, const AttentionShape& shape) {
  return !spec.causal && shape.d == packed::kD && shape.dv == packed::kD && shape.Nq == shape.Nk && shape.Nq >= 1 &&
         shape.Nq <= packed::kMaxT && cpu::gemm_path() == cpu::GemmPath::Auto && cpu::gemm_avx512_supported();
}

void attention_forward_packed_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv, float* O,
                                  float* lse, double* attn_fro, double* jac_fro) {
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    packed::forward_packed_impl<A, Deg>(spec, shape, qkv, O, lse, attn_fro, jac_fro);
  });
}

void attention_forward_packed_samples_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                          float* O, float* lse, double* attn_fro, double* jac_fro, int64_t b0,
                                          int64_t b1) {
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    packed::forward_packed_samples<A, Deg>(spec, shape, qkv, O, lse, attn_fro, jac_fro, b0, b1);
  });
}

void attention_backward_packed_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                   const float* O, const float* dO, const float* lse, float* dqkv) {
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    packed::backward_packed_impl<A, Deg>(spec, shape, qkv, O, dO, lse, dqkv);
  });
}

void attention_backward_packed_samples_cpu(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                           const float* O, const float* dO, const float* lse, float* dqkv, int64_t b0,
                                           int64_t b1) {
  dispatch_phi(spec.act, [&]<Activation A, int32_t Deg>() {
    packed::backward_packed_samples<A, Deg>(spec, shape, qkv, O, dO, lse, dqkv, b0, b1);
  });
}

}  // namespace attnsweep
