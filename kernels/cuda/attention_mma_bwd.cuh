// Tensor-core attention backward (issue #19, step 4): dQ, dK, dV on mma.sync m16n8k16,
// deterministic (no atomics: every gradient element is written by one thread of one
// block). bf16 only (the benchmarks' type), d = dv in {64, 128}.
//
// STATUS: COMPILED ONLY, NEVER RUN ON A GPU (as attention_mma.cuh). Reached only through
// attention_backward_cuda_mma (attention_cuda.h), not from attention_backward_cuda.
// One header: dK/dV and dQ share the fragment layouts and the recomputation of S.
//
// The math of fused_dkdv_kernel / fused_dq_kernel (attention_fused.cuh), per element
// (i query, j key), s = (q_i . k_j) * scale, live(i, j) as in the forward:
//   softmax:      p = exp(s - lse_i), dS = p (dP - D_i), D_i = dO_i . O_i;
//   element-wise: p = phi(s), dS = phi'(s) dP, phi resolved per query row (n_i);
//   dV = P^T dO, dK = dS^T Q * scale, dQ = dS K * scale; dead entries give p = dS = 0.
// Two kernels, both 4 warps x 16 rows, tiles of 64, two cp.async stages:
//   dkdv: a block owns 64 keys (K, V in shared memory, read as A fragments); it streams
//         the query tiles (Q, dO and each query's end / lse / D / c / bias), computes
//         S^T = K Q^T and dP^T = V dO^T (B from ldmatrix of Q, dO), P^T and dS^T in the
//         accumulators, which become the A operand of dV += P^T dO and dK += dS^T Q (B by
//         ldmatrix.trans of dO, Q). Causal blocks start at the first query tile that
//         sees their first key.
//   dq:   a block owns 64 query rows (Q, dO in shared memory, per-row statistics in
//         registers as in the forward); it streams key tiles, computes S and dP
//         (B from ldmatrix of K, V), dS, and dQ += dS K (B by ldmatrix.trans of K).
// Shared memory: 6 tiles of 64 x (d + 8) bf16 (d = 64: 55 KB; d = 128: 104 KB) plus
// the per-query statistics (dkdv) or key flags (dq).
// Both kernels write their accumulator tiles (dK times scale, dV; dQ times scale) through
// one forced-inline store_acc_tile (attention_mma.cuh; the forward's O goes through its
// store_acc_row), so the C-fragment-to-global map is written once.
//
// Resources (ptxas / cuobjdump -res-usage, CUDA 13.0, sm_90; tests/sass/check_mma_sass.sh):
// all 36 kernels (every registry activation; poly at degrees 1..4 and run-time) 0 stack,
// 0 spills, no LDL/STL (2026-12-02, after the split into forced-inline steps). Registers:
//                 dkdv d=64   dq d=64   dkdv d=128  dq d=128
//   softmax       197         185       252         233
//   poly 1..4     193-195     151-183   250-254     199-231
//   poly run-time 195         183       255         231
//   relu, relu2   193-195     183       248-251     231
//   sigmoid       194         182       253         230
// (poly degree 1: phi' = c does not depend on S, so the dQ kernel drops S = Q K^T.) The
// d = 128 dK/dV kernel sits at the 255 cap: full unrolling of the Q K^T k-loop spilled
// 32-56 bytes (unrolled by 2 now), and sigmoid spilled 24 bytes until phi' reused y.
// 2026-12-05, dK and dV stored by store_acc_tile (one after the other, no longer
// interleaved): dK/dV d = 64 1-2 registers fewer (192-196), d = 128 the same, 0-16 more
// instructions (of 1,900-3,300); the dQ and forward kernels' registers and instruction
// counts unchanged; still 0 stack, 0 spills.
// Build: attention_mma_bwd_d128_bf16.cu 35-59 s of one core (busy machine), d64 less.
#pragma once

#include "kernels/cuda/attention_mma.cuh"

namespace attnsweep::cuda::mma {

// Each backward kernel's dynamic shared memory, one layout for the kernel's pointers and
// the launch's size (bytes()).
// dK/dV: K and V of the block's keys [kBN][LD]; Q and dO double-buffered [2][kBM][LD]; the
// query tiles' statistics (QueryStats) [5][2][kBM] floats.
template <int D, class T>
struct DkdvSmem {
  static constexpr int LD = Geom<D>::LD;
  static constexpr size_t bytes() {
    return (2 * size_t(kBN) + 4 * size_t(kBM)) * LD * sizeof(T) + 5 * 2 * size_t(kBM) * sizeof(float);
  }
  T *Ks, *Vs, *Qs, *dOs;
  float* stats;
  __device__ explicit DkdvSmem(unsigned char* p)
      : Ks(reinterpret_cast<T*>(p)),
        Vs(Ks + kBN * LD),
        Qs(Vs + kBN * LD),
        dOs(Qs + 2 * kBM * LD),
        stats(reinterpret_cast<float*>(dOs + 2 * kBM * LD)) {}
};
// dQ: Q and dO of the block's queries [kBM][LD]; K and V double-buffered [2][kBN][LD];
// which keys of each K tile are live (issue_kv_tile) [2][kBN] floats.
template <int D, class T>
struct DqSmem {
  static constexpr int LD = Geom<D>::LD;
  static constexpr size_t bytes() {
    return (2 * size_t(kBM) + 4 * size_t(kBN)) * LD * sizeof(T) + 2 * size_t(kBN) * sizeof(float);
  }
  T *Qs, *dOs, *Ks, *Vs;
  float* kokf;
  __device__ explicit DqSmem(unsigned char* p)
      : Qs(reinterpret_cast<T*>(p)),
        dOs(Qs + kBM * LD),
        Ks(dOs + kBM * LD),
        Vs(Ks + 2 * kBN * LD),
        kokf(reinterpret_cast<float*>(Vs + 2 * kBN * LD)) {}
};

// acc (16 x 64 per warp, 8 n-tiles) += A (16 rows at `a_rows`, row-major [.][LD]) times
// B^T, B = 64 rows at `b_rows` ([.][LD]), over D: the forward's S = Q K^T, with A read
// from shared memory one k-step at a time.
template <int D, class T>
__device__ __forceinline__ void mma_abt(float (&acc)[kBN / 8][4], const T* a_rows, const T* b_rows, int lane) {
  constexpr int LD = Geom<D>::LD;
  // kk only moves addresses: unrolled by 2, so that ptxas does not hoist every k-step's
  // ldmatrix at d = 128 (full unrolling spilled 32-56 bytes in the dK/dV kernel).
#pragma unroll 2
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a_rows + ((lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
    for (int nn = 0; nn < kBN / 16; ++nn) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_rows + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816<T>(acc[2 * nn], af, bf[0], bf[1]);
      mma16816<T>(acc[2 * nn + 1], af, bf[2], bf[3]);
    }
  }
}

// mma_px (attention_mma.cuh) with A already packed (pa[k][4]: the A fragments of the 4
// k-steps).
template <int D, class T>
__device__ __forceinline__ void mma_px_packed(float (&out)[D / 8][4], const uint32_t (&pa)[kBN / 16][4],
                                              const T* x_rows, int lane) {
  constexpr int LD = Geom<D>::LD;
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t xf[4];
      ldmatrix_x4_trans(xf, x_rows + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dn * 16 + (lane >> 4) * 8);
      mma16816<T>(out[2 * dn], pa[kk], xf[0], xf[1]);
      mma16816<T>(out[2 * dn + 1], pa[kk], xf[2], xf[3]);
    }
  }
}

// Accumulators (8 n-tiles) to packed A fragments (4 k-steps) and back.
template <class T>
__device__ __forceinline__ void pack_a(uint32_t (&pa)[kBN / 16][4], const float (&c)[kBN / 8][4]) {
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    pa[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    pa[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    pa[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    pa[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}
// Element e of n-tile j from pa (inverse of pack_a), as float.
template <class T>
__device__ __forceinline__ float unpack_a(const uint32_t (&pa)[kBN / 16][4], int j, int e) {
  const uint32_t w = pa[j >> 1][(j & 1) * 2 + (e >> 1)];
  const uint16_t bits = static_cast<uint16_t>((e & 1) ? (w >> 16) : (w & 0xffffu));
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __uint_as_float(static_cast<uint32_t>(bits) << 16);
  } else {
    return __half2float(__ushort_as_half(bits));
  }
}

// p and g of one element from the raw dot product s (q.k unscaled): softmax g = p,
// element-wise g = phi'(s) (from phi's value where the activation offers it); dead:
// both 0.
template <Activation A, int Deg>
__device__ __forceinline__ void p_g(float& s, float& g, bool live, float scale, float lse2, float c, float bias,
                                    int32_t degree) {
  if constexpr (A == Activation::softmax) {
    const float p = live ? ex2(s * scale * 1.4426950408889634f - lse2) : 0.0f;
    s = p;
    g = p;
  } else {
    PhiParams pp;
    pp.activation = A;
    pp.degree = degree;
    pp.c = c;
    pp.bias = bias;
    float y, dy;
    phi_dphi_fixed<A, Deg>(
        pp, s * scale, [](float v) { return __expf(v); }, y, dy);
    s = live ? y : 0.0f;
    g = live ? dy : 0.0f;
  }
}

// p and dS of one element from the raw dot products (s: q.k unscaled, dp: dO.v).
template <Activation A, int Deg>
__device__ __forceinline__ void p_ds(float& s, float& dp, bool live, float scale, float lse2, float dsum, float c,
                                     float bias, int32_t degree) {
  if constexpr (A == Activation::softmax) {
    const float p = live ? ex2(s * scale * 1.4426950408889634f - lse2) : 0.0f;
    s = p;
    dp = p * (dp - dsum);
  } else {
    PhiParams pp;
    pp.activation = A;
    pp.degree = degree;
    pp.c = c;
    pp.bias = bias;
    auto exp_fn = [](float v) { return __expf(v); };
    const float x = s * scale;
    s = live ? phi_fixed<A, Deg>(pp, x, exp_fn) : 0.0f;
    dp = live ? dphi_fixed<A, Deg>(pp, x, exp_fn) * dp : 0.0f;
  }
}

// ---- dK, dV ------------------------------------------------------------------------------

// Per query row of a streamed tile, in shared memory ([2 stages][kBM] each): its key
// limit (row_end, int bits in a float), lse * log2(e) and D (softmax), c and bias.
struct QueryStats {
  float* end;
  float* lse;
  float* dsum;
  float* c;
  float* bias;
  __device__ __forceinline__ explicit QueryStats(float* base)
      : end(base), lse(base + 2 * kBM), dsum(base + 4 * kBM), c(base + 6 * kBM), bias(base + 8 * kBM) {}

  // Query tile starting at q0 into stage st.
  template <bool Softmax>
  __device__ __forceinline__ void load(const BwdArgs& a, int64_t bh, int64_t b, int64_t q0, int st) const {
    const MaskInfo& mask = a.mask;
    for (int r = threadIdx.x; r < kBM; r += kThreads) {
      const int64_t i = q0 + r;
      int64_t n;
      const int64_t e = mask.row_end(b, i, n);
      const PhiParams pp = resolve_phi(a.act, n);
      end[st * kBM + r] = __int_as_float(static_cast<int>(e));
      lse[st * kBM + r] = Softmax && i < mask.Nq ? a.lse[bh * mask.Nq + i] * 1.4426950408889634f : 0.0f;
      dsum[st * kBM + r] = Softmax && i < mask.Nq ? a.Dsum[bh * mask.Nq + i] : 0.0f;
      c[st * kBM + r] = pp.c;
      bias[st * kBM + r] = pp.bias;
    }
  }
};

// The keys of a thread's two rows of S^T (h = 0: groupID, h = 1: groupID + 8 of its
// warp's 16): their index and whether they exist and the key mask allows them.
struct QuadKeys {
  bool ok[2];
  int abs[2];
  __device__ __forceinline__ QuadKeys(const MaskInfo& mask, const KeyBlock<kBN, kBM>& blk, int warp, int g) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = warp * 16 + g + 8 * h;
      abs[h] = static_cast<int>(blk.k0 + key);
      ok[h] = key < blk.rows && mask.key_allowed(blk.b, blk.k0 + key);
    }
  }
};

// First half of a query tile (stage st): S^T = K Q^T, then P^T and G^T (softmax: G = P;
// element-wise: G = phi'(S)) packed to T in pP and pG.
template <Activation A, int Deg, int D, class T>
__device__ __forceinline__ void dkdv_p_g(uint32_t (&pP)[kBN / 16][4], uint32_t (&pG)[kBN / 16][4], const BwdArgs& a,
                                         const T* Kw, const T* Qst, const QueryStats& qs, const QuadKeys& keys, int st,
                                         int lane) {
  constexpr int NT = kBN / 8;
  const int tq = lane & 3;
  float sT[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) sT[j][0] = sT[j][1] = sT[j][2] = sT[j][3] = 0.0f;
  mma_abt<D, T>(sT, Kw, Qst, lane);  // S^T = K Q^T
  float gT[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = st * kBM + 8 * j + 2 * tq + (e & 1);  // this element's query
      const int h = e >> 1;
      const bool live = keys.ok[h] && keys.abs[h] < __float_as_int(qs.end[col]);
      p_g<A, Deg>(sT[j][e], gT[j][e], live, a.scale, qs.lse[col], qs.c[col], qs.bias[col], a.act.degree);
    }
  pack_a<T>(pP, sT);
  pack_a<T>(pG, gT);
}

// Second half: dP^T = V dO^T, dS^T = G^T (dP^T - D) (softmax) or G^T dP^T, packed to T
// in pS.
template <Activation A, int D, class T>
__device__ __forceinline__ void dkdv_ds(uint32_t (&pS)[kBN / 16][4], const uint32_t (&pG)[kBN / 16][4], const T* Vw,
                                        const T* dOst, const QueryStats& qs, int st, int lane) {
  constexpr int NT = kBN / 8;
  const int tq = lane & 3;
  float dpT[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j) dpT[j][0] = dpT[j][1] = dpT[j][2] = dpT[j][3] = 0.0f;
  mma_abt<D, T>(dpT, Vw, dOst, lane);  // dP^T = V dO^T
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int col = st * kBM + 8 * j + 2 * tq + (e & 1);
      const float gv = unpack_a<T>(pG, j, e);
      dpT[j][e] = A == Activation::softmax ? gv * (dpT[j][e] - qs.dsum[col]) : gv * dpT[j][e];
    }
  pack_a<T>(pS, dpT);
}

template <Activation A, int Deg, int D, class T>
__global__ void __launch_bounds__(kThreads, ATTNSWEEP_MMA_MIN_BLOCKS) mma_dkdv_kernel(BwdArgs a) {
  constexpr int LD = Geom<D>::LD;
  constexpr int OT = D / 8;
  ATTN_DYNAMIC_SHARED(unsigned char, smem_raw);
  const DkdvSmem<D, T> sm(smem_raw);
  T *const Ks = sm.Ks, *const Vs = sm.Vs, *const Qs = sm.Qs, *const dOs = sm.dOs;
  const QueryStats qs(sm.stats);

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const KeyBlock<kBN, kBM> blk(mask, a.H);
  const T* Qg = static_cast<const T*>(a.Q) + blk.bh * Nq * D;
  const T* dOg = static_cast<const T*>(a.dO) + blk.bh * Nq * D;

  async_tile<D, kBN>(Ks, static_cast<const T*>(a.K) + (blk.bh * Nk + blk.k0) * D, blk.rows);
  async_tile<D, kBN>(Vs, static_cast<const T*>(a.V) + (blk.bh * Nk + blk.k0) * D, blk.rows);
  cp_async_commit();
  const QuadKeys keys(mask, blk, warp, lane >> 2);

  const int ntiles = blk.qstart < Nq ? static_cast<int>((Nq - blk.qstart + kBM - 1) / kBM) : 0;
  auto issue = [&](int t) {
    const int64_t q0 = blk.qstart + int64_t(t) * kBM;
    const int st = t & 1, qrows = tile_rows(Nq, q0, kBM);
    async_tile<D, kBM>(Qs + st * kBM * LD, Qg + q0 * D, qrows);
    async_tile<D, kBM>(dOs + st * kBM * LD, dOg + q0 * D, qrows);
    qs.load<A == Activation::softmax>(a, blk.bh, blk.b, q0, st);
  };
  if (ntiles > 0) issue(0);
  cp_async_commit();

  float dK[OT][4], dV[OT][4];
#pragma unroll
  for (int j = 0; j < OT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) dK[j][e] = dV[j][e] = 0.0f;

  // Each tile in two halves, to keep the live registers near dK + dV + 48. G is rounded
  // to T before dS: a relative 2^-9 (bf16), as dS's own rounding for the mma.
  pipelined_tiles(ntiles, issue, [&](int, int st) {
    const T* Qst = Qs + st * kBM * LD;
    const T* dOst = dOs + st * kBM * LD;
    uint32_t pP[kBN / 16][4], pG[kBN / 16][4];
    dkdv_p_g<A, Deg, D, T>(pP, pG, a, Ks + warp * 16 * LD, Qst, qs, keys, st, lane);
    mma_px_packed<D, T>(dV, pP, dOst, lane);  // dV += P^T dO
    dkdv_ds<A, D, T>(pP, pG, Vs + warp * 16 * LD, dOst, qs, st, lane);
    mma_px_packed<D, T>(dK, pP, Qst, lane);  // dK += dS^T Q (pP now holds dS^T)
  });

  const int64_t k_off = (blk.bh * Nk + blk.k0) * D;
  store_acc_tile<D, T>(static_cast<T*>(a.dK) + k_off, dK, warp, lane, blk.rows, a.scale);
  store_acc_tile<D, T>(static_cast<T*>(a.dV) + k_off, dV, warp, lane, blk.rows, 1.0f);
}

// ---- dQ ----------------------------------------------------------------------------------

template <Activation A, int Deg, int D, class T>
__global__ void __launch_bounds__(kThreads, ATTNSWEEP_MMA_MIN_BLOCKS) mma_dq_kernel(BwdArgs a) {
  constexpr int LD = Geom<D>::LD;
  constexpr int NT = kBN / 8, OT = D / 8;
  ATTN_DYNAMIC_SHARED(unsigned char, smem_raw);
  const DqSmem<D, T> sm(smem_raw);
  T *const Qs = sm.Qs, *const dOs = sm.dOs, *const Ks = sm.Ks, *const Vs = sm.Vs;
  float* const kokf = sm.kokf;

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const QueryBlock<kBM> blk(mask, a.H);
  const T* Kg = static_cast<const T*>(a.K) + blk.bh * Nk * D;
  const T* Vg = static_cast<const T*>(a.V) + blk.bh * Nk * D;
  constexpr bool kSoftmax = A == Activation::softmax;

  async_tile<D, kBM>(Qs, static_cast<const T*>(a.Q) + (blk.bh * Nq + blk.q0) * D, blk.rows);
  async_tile<D, kBM>(dOs, static_cast<const T*>(a.dO) + (blk.bh * Nq + blk.q0) * D, blk.rows);
  cp_async_commit();
  const int ntiles = static_cast<int>((blk.kend + kBN - 1) / kBN);
  auto issue = [&](int t) { issue_kv_tile<D>(Ks, Vs, kokf, Kg, Vg, mask, blk.b, t); };
  if (ntiles > 0) issue(0);
  cp_async_commit();

  const QuadRows rows(mask, a.act, blk.b, blk.q0 + warp * 16 + (lane >> 2));
  float lse2[2], dsum[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t i = blk.q0 + warp * 16 + (lane >> 2) + 8 * h;
    lse2[h] = kSoftmax && i < Nq ? a.lse[blk.bh * Nq + i] * 1.4426950408889634f : 0.0f;
    dsum[h] = kSoftmax && i < Nq ? a.Dsum[blk.bh * Nq + i] : 0.0f;
  }
  float dQ[OT][4];
#pragma unroll
  for (int j = 0; j < OT; ++j) dQ[j][0] = dQ[j][1] = dQ[j][2] = dQ[j][3] = 0.0f;

  pipelined_tiles(ntiles, issue, [&](int t, int st) {
    const T* Kst = Ks + st * kBN * LD;
    const TileLive live(rows.end, int64_t(t) * kBN, kokf + st * kBN, mask.key_mask != nullptr, lane & 3);
    float s[NT][4], dp[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[j][e] = dp[j][e] = 0.0f;
    mma_abt<D, T>(s, Qs + warp * 16 * LD, Kst, lane);                   // S = Q K^T
    mma_abt<D, T>(dp, dOs + warp * 16 * LD, Vs + st * kBN * LD, lane);  // dP = dO V^T
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        p_ds<A, Deg>(s[j][e], dp[j][e], live(j, e), a.scale, lse2[h], dsum[h], rows.pp[h].c, rows.pp[h].bias,
                     a.act.degree);
      }
    mma_px<D, T>(dQ, dp, Kst, lane);  // dQ += dS K
  });

  store_acc_tile<D, T>(static_cast<T*>(a.dQ) + (blk.bh * Nq + blk.q0) * D, dQ, warp, lane, blk.rows, a.scale);
}

template <Activation A, int Deg, int D, class T>
void launch_backward(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream) {
  const char* what = "attention backward (CUDA mma)";
  launch_blocks(what, mma_dkdv_kernel<A, Deg, D, T>, (Nk + kBN - 1) / kBN * BH, kThreads, DkdvSmem<D, T>::bytes(),
                stream, args);
  launch_blocks(what, mma_dq_kernel<A, Deg, D, T>, (Nq + kBM - 1) / kBM * BH, kThreads, DqSmem<D, T>::bytes(), stream,
                args);
}

template <int D, class T>
void backward_variants(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream) {
  dispatch_activation(args.act, [&](auto a_tag, auto deg_tag) {
    launch_backward<decltype(a_tag)::value, decltype(deg_tag)::value, D, T>(args, BH, Nq, Nk, stream);
  });
}

// One per file (attention_mma_bwd_d{64,128}_bf16.cu).
void backward_d64_bf16(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream);
void backward_d128_bf16(const BwdArgs& args, int64_t BH, int64_t Nq, int64_t Nk, cudaStream_t stream);

}  // namespace attnsweep::cuda::mma
