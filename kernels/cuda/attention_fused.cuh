// Fused attention kernels, FlashAttention-2 style: one block owns a tile of query rows (forward,
// dQ) or of keys (dK, dV) and streams the other side through shared memory, so the
// N x N score matrix never reaches global memory. Templated on the activation (element-
// wise phi needs no running maximum; softmax rescales online and keeps running sums of
// p~, p~^2, p~^3 for its Jacobian norm), the head dimension D and the element type
// (float or bf16, converted to float on load; all arithmetic is float32).
//
// Thread layout (256 threads = 16 x 16): ty = tid / 16 owns rows ty + 16 r of a tile,
// tx = tid % 16 owns columns tx + 16 c; the 16 lanes sharing a row are one half-warp,
// so row reductions are xor-butterflies that give every lane the same bits.
// Determinism: per-row norm partials are reduced in a fixed order by a second kernel;
// the backward writes every gradient element from exactly one thread (no atomics):
// one kernel over key tiles computes dK, dV and one over query tiles computes dQ, both
// recomputing S.
// The forward and both backward kernels share the tile loads, the
// activation templates and the reductions, so they are one header.
// Each kernel's dynamic shared memory is declared once, by its layout (FwdSmem, DkdvSmem,
// DqSmem: every tile's offset and row stride, and the total bytes): the kernel carves
// its tiles from it and the host sizes the launch by it. An accumulator tile goes to
// global memory through store_acc_tile / store_acc_row (O, dK, dV, dQ).
#pragma once

#include "kernels/cuda/attention_common.cuh"

#include <cmath>
#include <stdexcept>
#include <type_traits>

namespace attnsweep::cuda::fused {

inline constexpr int kThreads = 256;

template <int D>
struct Tiles {
  static constexpr int BM = 64;                  // query rows per tile
  static constexpr int BN = D >= 128 ? 32 : 64;  // keys per tile
  static_assert(D % 16 == 0 && BM % 16 == 0 && BN % 16 == 0);
};

__device__ __forceinline__ void store_as(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16(v);
}

// One row of a thread's accumulator tile (its columns tx + 16 c of D) times mul, as T,
// into the global row that starts at grow.
template <int D, class T>
__device__ __forceinline__ void store_acc_row(T* grow, const float (&acc)[D / 16], int tx, float mul) {
#pragma unroll
  for (int c = 0; c < D / 16; ++c) store_as(grow + tx + 16 * c, acc[c] * mul);
}

// A thread's accumulator tile (rows ty + 16 r of the block's tile, those below `valid`)
// times mul, as T, into global rows of D elements from g (the tile's first row).
template <int R, int D, class T>
__device__ __forceinline__ void store_acc_tile(T* g, const float (&acc)[R][D / 16], int ty, int tx, int valid,
                                               float mul) {
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int row = ty + 16 * r;
    if (row < valid) store_acc_row<D, T>(g + static_cast<int64_t>(row) * D, acc[r], tx, mul);
  }
}

__device__ __forceinline__ float half_warp_sum(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o, 16);
  return v;
}
__device__ __forceinline__ float half_warp_max(float v) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, 16));
  return v;
}

template <Activation A>
__device__ __forceinline__ float phi_t(const PhiParams& p, float s) {
  return phi_fixed<A, 0>(p, s, StdExp{});
}
template <Activation A>
__device__ __forceinline__ float dphi_t(const PhiParams& p, float s) {
  return dphi_fixed<A, 0>(p, s, StdExp{});
}

// rows x D tile from global (row stride D) into shared memory (row stride LD), zero
// rows at and beyond valid_rows.
template <int D, int LD, int ROWS, class T>
__device__ __forceinline__ void load_tile(float* __restrict__ dst, const T* __restrict__ src, int valid_rows) {
  for (int idx = threadIdx.x; idx < ROWS * D; idx += kThreads) {
    const int r = idx / D, k = idx % D;
    dst[r * LD + k] = r < valid_rows ? to_f32(src[static_cast<int64_t>(r) * D + k]) : 0.0f;
  }
}

// acc[R][C] += A_tile[rows ty+16r][0..K) . B_tile[cols tx+16c][0..K)  (both row-major in smem)
template <int R, int C, int K, int LDA, int LDB>
__device__ __forceinline__ void tile_dot(float (&acc)[R][C], const float* __restrict__ As, const float* __restrict__ Bs,
                                         int ty, int tx) {
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float a[R], bv[C];
#pragma unroll
    for (int r = 0; r < R; ++r) a[r] = As[(ty + 16 * r) * LDA + k];
#pragma unroll
    for (int c = 0; c < C; ++c) bv[c] = Bs[(tx + 16 * c) * LDB + k];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(a[r], bv[c], acc[r][c]);
  }
}

// acc[R][C] += sum_j W[j][rows ty+16r] * X[j][cols tx+16c]  (W stored [J][LDW], X [J][LDX])
// transposed = true reads W as [rows][J] instead.
template <int R, int C, int J, int LDW, int LDX, bool W_ROWS_FIRST>
__device__ __forceinline__ void tile_accum(float (&acc)[R][C], const float* __restrict__ Ws,
                                           const float* __restrict__ Xs, int ty, int tx) {
#pragma unroll 4
  for (int j = 0; j < J; ++j) {
    float w[R], x[C];
#pragma unroll
    for (int r = 0; r < R; ++r) w[r] = W_ROWS_FIRST ? Ws[(ty + 16 * r) * LDW + j] : Ws[j * LDW + ty + 16 * r];
#pragma unroll
    for (int c = 0; c < C; ++c) x[c] = Xs[j * LDX + tx + 16 * c];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int c = 0; c < C; ++c) acc[r][c] = fmaf(w[r], x[c], acc[r][c]);
  }
}

// The dynamic shared memory of each kernel, in floats: each tile's offset (the one
// before it plus its size) and row stride, and the launch's bytes. Rows of D are padded
// to D + 1 where a thread reads down a column (no bank conflicts), P / dS rows to BN + 1.

// Forward: Q [BM][LDQ] (all key tiles), K [BN][LDQ] and V [BN][D] (this key tile), P
// [BM][LDP] (phi(S) of this tile), kok [BN] (this tile's key flags).
template <int D>
struct FwdSmem {
  static constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN, LDQ = D + 1, LDP = BN + 1;
  static constexpr int Q = 0;
  static constexpr int K = Q + BM * LDQ;
  static constexpr int V = K + BN * LDQ;
  static constexpr int P = V + BN * D;
  static constexpr int kok = P + BM * LDP;
  static constexpr int floats = kok + BN;
  static constexpr size_t bytes = sizeof(float) * floats;
};

// Softmax's online update of one row with this tile's scaled scores s (this thread's
// columns; dead ones excluded by live): s becomes p~ = exp(s - m_new), l, n1 (sum p~^2),
// n2 (sum p~^3) and acc are rescaled by alpha = exp(m - m_new).
template <int RN, int RD>
__device__ __forceinline__ void softmax_online(float (&s)[RN], const bool (&live)[RN], float& m, float& l, float& n1,
                                               float& n2, float (&acc)[RD], bool norms) {
  float mx = -INFINITY;
#pragma unroll
  for (int c = 0; c < RN; ++c)
    if (live[c]) mx = fmaxf(mx, s[c]);
  const float m_new = fmaxf(m, half_warp_max(mx));
  // Nothing live so far in this row: keep everything at zero (and avoid inf - inf).
  const float alpha = m_new == -INFINITY ? 1.0f : __expf(m - m_new);
  float ps = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma unroll
  for (int c = 0; c < RN; ++c) {
    const float p = live[c] ? __expf(s[c] - m_new) : 0.0f;
    s[c] = p;
    ps += p;
    p2 += p * p;
    p3 += p * p * p;
  }
  l = l * alpha + ps;
  if (norms) {
    n1 = n1 * alpha * alpha + p2;          // running sum p~^2
    n2 = n2 * alpha * alpha * alpha + p3;  // running sum p~^3
  }
#pragma unroll
  for (int c = 0; c < RD; ++c) acc[c] *= alpha;
  m = m_new;
}

// An element-wise phi on one row's scaled scores: s becomes phi(s) (0 where dead), n1
// and n2 gather ||phi(S)||^2 and ||phi'(S)||^2 (the Jacobian is diagonal).
template <Activation A, int RN>
__device__ __forceinline__ void phi_row(float (&s)[RN], const bool (&live)[RN], const PhiParams& pp, float& n1,
                                        float& n2, bool norms) {
#pragma unroll
  for (int c = 0; c < RN; ++c) {
    const float x = s[c];
    const float p = live[c] ? phi_t<A>(pp, x) : 0.0f;
    if (norms && live[c]) {
      const float g = dphi_t<A>(pp, x);
      n1 = fmaf(p, p, n1);
      n2 = fmaf(g, g, n2);
    }
    s[c] = p;
  }
}

// The forward's epilogue for this thread's rows ty + 16 r: O = acc / l (softmax) or acc,
// lse, and the per-row norms (half-warp reductions outside any row-dependent branch).
template <Activation A, int D, class T, int RM, int RD>
__device__ __forceinline__ void fused_forward_store(const FwdArgs& a, const QueryBlock<Tiles<D>::BM>& blk, int ty,
                                                    int tx, const float (&m)[RM], const float (&l)[RM],
                                                    const float (&n1)[RM], const float (&n2)[RM],
                                                    const float (&acc)[RM][RD]) {
  const int64_t Nq = a.mask.Nq;
  T* Og = static_cast<T*>(a.O) + (blk.bh * Nq + blk.q0) * D;
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const int row = ty + 16 * r;
    float inv = 1.0f;
    double attn = 0.0, jac = 0.0;
    if constexpr (A == Activation::softmax) {
      // Shuffles outside any row-dependent branch: the two half-warps may differ.
      const float z = half_warp_sum(l[r]);
      const float a2 = half_warp_sum(n1[r]), a3 = half_warp_sum(n2[r]);
      inv = z > 0.0f ? 1.0f / z : 0.0f;
      if (a.norms && z > 0.0f) {
        const RowNormSq rn = softmax_row_norms_from_sums(z, a2, a3);
        attn = rn.attn;
        jac = rn.jac;
      }
      if (a.lse && row < blk.rows && tx == 0) a.lse[blk.bh * Nq + blk.q0 + row] = z > 0.0f ? m[r] + logf(z) : -INFINITY;
    } else if (a.norms) {
      attn = half_warp_sum(n1[r]);
      jac = half_warp_sum(n2[r]);
    }
    if (row < blk.rows) {
      store_acc_row<D, T>(Og + static_cast<int64_t>(row) * D, acc[r], tx, inv);
      if (a.norms && tx == 0) {
        a.row_attn[blk.bh * Nq + blk.q0 + row] = attn;
        a.row_jac[blk.bh * Nq + blk.q0 + row] = jac;
      }
    }
  }
}

// O [rows of this tile] = phi(Q K^T * scale) V, lse, per-row norm partials.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_forward_kernel(FwdArgs a) {
  using L = FwdSmem<D>;
  constexpr int BM = L::BM, BN = L::BN, LDQ = L::LDQ, LDP = L::LDP;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* const Qs = smem + L::Q;
  float* const Ks = smem + L::K;
  float* const Vs = smem + L::V;
  float* const Ps = smem + L::P;
  float* const kok = smem + L::kok;

  const MaskInfo& mask = a.mask;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const QueryBlock<BM> blk(mask, a.H);
  const T* Kg = static_cast<const T*>(a.K) + blk.bh * mask.Nk * D;
  const T* Vg = static_cast<const T*>(a.V) + blk.bh * mask.Nk * D;
  load_tile<D, LDQ, BM>(Qs, static_cast<const T*>(a.Q) + (blk.bh * mask.Nq + blk.q0) * D, blk.rows);

  PhiParams pp[RM];
  int64_t end[RM];
  float m[RM], l[RM], n1[RM], n2[RM], acc[RM][RD];
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    int64_t n;
    end[r] = mask.row_end(blk.b, blk.q0 + ty + 16 * r, n);
    pp[r] = resolve_phi(a.act, n);
    m[r] = -INFINITY;
    l[r] = n1[r] = n2[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < RD; ++c) acc[r][c] = 0.0f;
  }

  for (int64_t k0 = 0; k0 < blk.kend; k0 += BN) {
    const int krows = tile_rows(mask.Nk, k0, BN);
    __syncthreads();  // the previous tile's K, V, P are consumed
    load_tile<D, LDQ, BN>(Ks, Kg + k0 * D, krows);
    load_tile<D, D, BN>(Vs, Vg + k0 * D, krows);
    load_key_flags<BN, kThreads>(kok, mask, blk.b, k0, krows);
    __syncthreads();

    float s[RM][RN] = {};
    tile_dot<RM, RN, D, LDQ, LDQ>(s, Qs, Ks, ty, tx);
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      bool live[RN];
#pragma unroll
      for (int c = 0; c < RN; ++c) {
        const int j = tx + 16 * c;
        live[c] = k0 + j < end[r] && kok[j] != 0.0f;
        s[r][c] *= a.scale;
      }
      if constexpr (A == Activation::softmax)
        softmax_online(s[r], live, m[r], l[r], n1[r], n2[r], acc[r], a.norms);
      else
        phi_row<A>(s[r], live, pp[r], n1[r], n2[r], a.norms);
#pragma unroll
      for (int c = 0; c < RN; ++c) Ps[(ty + 16 * r) * LDP + tx + 16 * c] = s[r][c];
    }
    __syncthreads();
    tile_accum<RM, RD, BN, LDP, D, true>(acc, Ps, Vs, ty, tx);  // acc += P V
  }
  fused_forward_store<A, D, T>(a, blk, ty, tx, m, l, n1, n2, acc);
}

// P and dS of one (query rows ty+16r, keys tx+16c) sub-tile from S and dP (both
// unscaled dot products on entry), for the row's resolved phi.
template <Activation A, int RM, int RN>
__device__ __forceinline__ void p_and_ds(float (&s)[RM][RN], float (&dp)[RM][RN], const BwdArgs& a,
                                         const PhiParams (&pp)[RM], const int64_t (&end)[RM], const float (&lse)[RM],
                                         const float (&dsum)[RM], const float* kok, int64_t k0, int tx) {
#pragma unroll
  for (int r = 0; r < RM; ++r)
#pragma unroll
    for (int c = 0; c < RN; ++c) {
      const int j = tx + 16 * c;
      const bool live = k0 + j < end[r] && kok[j] != 0.0f;
      const float x = s[r][c] * a.scale;
      if constexpr (A == Activation::softmax) {
        const float p = live ? __expf(x - lse[r]) : 0.0f;
        s[r][c] = p;
        dp[r][c] = p * (dp[r][c] - dsum[r]);
      } else {
        s[r][c] = live ? phi_t<A>(pp[r], x) : 0.0f;
        dp[r][c] = live ? dphi_t<A>(pp[r], x) * dp[r][c] : 0.0f;
      }
    }
}

// dK, dV: K, V [BN][LD] (the block's keys), Q, dO [BM][LD] (this query tile), P, dS
// [BM][LDP], kok [BN] (the block's key flags).
template <int D>
struct DkdvSmem {
  static constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN, LD = D + 1, LDP = BN + 1;
  static constexpr int K = 0;
  static constexpr int V = K + BN * LD;
  static constexpr int Q = V + BN * LD;
  static constexpr int dO = Q + BM * LD;
  static constexpr int P = dO + BM * LD;
  static constexpr int dS = P + BM * LDP;
  static constexpr int kok = dS + BM * LDP;
  static constexpr int floats = kok + BN;
  static constexpr size_t bytes = sizeof(float) * floats;
};

// dV = P^T dO and dK = dS^T Q * scale for one tile of BN keys, over all query tiles.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_dkdv_kernel(BwdArgs a) {
  using L = DkdvSmem<D>;
  constexpr int BM = L::BM, BN = L::BN, LD = L::LD, LDP = L::LDP;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* const Ks = smem + L::K;
  float* const Vs = smem + L::V;
  float* const Qs = smem + L::Q;
  float* const dOs = smem + L::dO;
  float* const Ps = smem + L::P;
  float* const dSs = smem + L::dS;
  float* const kok = smem + L::kok;
  __shared__ PhiParams r_pp[BM];
  __shared__ int64_t r_end[BM];
  __shared__ float r_lse[BM], r_dsum[BM];

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const KeyBlock<BN, BM> blk(mask, a.H);
  const int64_t bh = blk.bh, b = blk.b, k0 = blk.k0;
  const T* Qg = static_cast<const T*>(a.Q) + bh * Nq * D;
  const T* dOg = static_cast<const T*>(a.dO) + bh * Nq * D;
  load_tile<D, LD, BN>(Ks, static_cast<const T*>(a.K) + (bh * Nk + k0) * D, blk.rows);
  load_tile<D, LD, BN>(Vs, static_cast<const T*>(a.V) + (bh * Nk + k0) * D, blk.rows);
  load_key_flags<BN, kThreads>(kok, mask, b, k0, blk.rows);

  float dK[RN][RD] = {}, dV[RN][RD] = {};
  for (int64_t q0 = blk.qstart; q0 < Nq; q0 += BM) {
    const int qrows = tile_rows(Nq, q0, BM);
    __syncthreads();  // previous Q, dO, P, dS consumed
    load_tile<D, LD, BM>(Qs, Qg + q0 * D, qrows);
    load_tile<D, LD, BM>(dOs, dOg + q0 * D, qrows);
    for (int i = threadIdx.x; i < BM; i += kThreads) {
      int64_t n;
      r_end[i] = mask.row_end(b, q0 + i, n);
      r_pp[i] = resolve_phi(a.act, n);
      r_lse[i] = a.lse && i < qrows ? a.lse[bh * Nq + q0 + i] : 0.0f;
      r_dsum[i] = a.Dsum && i < qrows ? a.Dsum[bh * Nq + q0 + i] : 0.0f;
    }
    __syncthreads();

    PhiParams pp[RM];
    int64_t end[RM];
    float lse[RM], dsum[RM];
#pragma unroll
    for (int r = 0; r < RM; ++r) {
      const int i = ty + 16 * r;
      pp[r] = r_pp[i];
      end[r] = r_end[i];
      lse[r] = r_lse[i];
      dsum[r] = r_dsum[i];
    }
    float s[RM][RN] = {}, dp[RM][RN] = {};
    tile_dot<RM, RN, D, LD, LD>(s, Qs, Ks, ty, tx);    // S = Q K^T (unscaled)
    tile_dot<RM, RN, D, LD, LD>(dp, dOs, Vs, ty, tx);  // dP = dO V^T
    p_and_ds<A>(s, dp, a, pp, end, lse, dsum, kok, k0, tx);
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < RN; ++c) {
        Ps[(ty + 16 * r) * LDP + tx + 16 * c] = s[r][c];
        dSs[(ty + 16 * r) * LDP + tx + 16 * c] = dp[r][c];
      }
    __syncthreads();
    // Thread now owns keys ty+16r and dims tx+16c.
    tile_accum<RN, RD, BM, LDP, LD, false>(dV, Ps, dOs, ty, tx);  // dV += P^T dO
    tile_accum<RN, RD, BM, LDP, LD, false>(dK, dSs, Qs, ty, tx);  // dK += dS^T Q
  }

  store_acc_tile<RN, D, T>(static_cast<T*>(a.dK) + (bh * Nk + k0) * D, dK, ty, tx, blk.rows, a.scale);
  store_acc_tile<RN, D, T>(static_cast<T*>(a.dV) + (bh * Nk + k0) * D, dV, ty, tx, blk.rows, 1.0f);
}

// dQ: Q, dO [BM][LD] (the block's rows), K, V [BN][LD] (this key tile), dS [BM][LDP],
// kok [BN] (this tile's key flags).
template <int D>
struct DqSmem {
  static constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN, LD = D + 1, LDP = BN + 1;
  static constexpr int Q = 0;
  static constexpr int dO = Q + BM * LD;
  static constexpr int K = dO + BM * LD;
  static constexpr int V = K + BN * LD;
  static constexpr int dS = V + BN * LD;
  static constexpr int kok = dS + BM * LDP;
  static constexpr int floats = kok + BN;
  static constexpr size_t bytes = sizeof(float) * floats;
};

// dQ = dS K * scale for one tile of BM query rows, over all key tiles.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_dq_kernel(BwdArgs a) {
  using L = DqSmem<D>;
  constexpr int BM = L::BM, BN = L::BN, LD = L::LD, LDP = L::LDP;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16;
  ATTN_DYNAMIC_SHARED(float, smem);
  float* const Qs = smem + L::Q;
  float* const dOs = smem + L::dO;
  float* const Ks = smem + L::K;
  float* const Vs = smem + L::V;
  float* const dSs = smem + L::dS;
  float* const kok = smem + L::kok;

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const QueryBlock<BM> blk(mask, a.H);
  const int64_t bh = blk.bh, b = blk.b, q0 = blk.q0;
  const int qrows = blk.rows;
  const T* Kg = static_cast<const T*>(a.K) + bh * Nk * D;
  const T* Vg = static_cast<const T*>(a.V) + bh * Nk * D;
  load_tile<D, LD, BM>(Qs, static_cast<const T*>(a.Q) + (bh * Nq + q0) * D, qrows);
  load_tile<D, LD, BM>(dOs, static_cast<const T*>(a.dO) + (bh * Nq + q0) * D, qrows);

  PhiParams pp[RM];
  int64_t end[RM];
  float lse[RM], dsum[RM], dQ[RM][RD] = {};
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const int64_t i = q0 + ty + 16 * r;
    int64_t n;
    end[r] = mask.row_end(b, i, n);
    pp[r] = resolve_phi(a.act, n);
    lse[r] = a.lse && i < Nq ? a.lse[bh * Nq + i] : 0.0f;
    dsum[r] = a.Dsum && i < Nq ? a.Dsum[bh * Nq + i] : 0.0f;
  }
  for (int64_t k0 = 0; k0 < blk.kend; k0 += BN) {
    const int krows = tile_rows(Nk, k0, BN);
    __syncthreads();  // previous K, V, dS consumed
    load_tile<D, LD, BN>(Ks, Kg + k0 * D, krows);
    load_tile<D, LD, BN>(Vs, Vg + k0 * D, krows);
    load_key_flags<BN, kThreads>(kok, mask, b, k0, krows);
    __syncthreads();
    float s[RM][RN] = {}, dp[RM][RN] = {};
    tile_dot<RM, RN, D, LD, LD>(s, Qs, Ks, ty, tx);
    tile_dot<RM, RN, D, LD, LD>(dp, dOs, Vs, ty, tx);
    p_and_ds<A>(s, dp, a, pp, end, lse, dsum, kok, k0, tx);
#pragma unroll
    for (int r = 0; r < RM; ++r)
#pragma unroll
      for (int c = 0; c < RN; ++c) dSs[(ty + 16 * r) * LDP + tx + 16 * c] = dp[r][c];
    __syncthreads();
    tile_accum<RM, RD, BN, LDP, LD, true>(dQ, dSs, Ks, ty, tx);  // dQ += dS K
  }

  store_acc_tile<RM, D, T>(static_cast<T*>(a.dQ) + (bh * Nq + q0) * D, dQ, ty, tx, qrows, a.scale);
}

// ---- host side ------------------------------------------------------------------------

template <class F>
void dispatch(Activation act, int64_t d, CudaDType dtype, F&& f) {
  auto with_type = [&](auto a_tag, auto d_tag) {
    if (dtype == CudaDType::bf16)
      f(a_tag, d_tag, __nv_bfloat16{});
    else
      f(a_tag, d_tag, float{});
  };
  auto with_d = [&](auto a_tag) {
    switch (d) {
      case 16: with_type(a_tag, std::integral_constant<int, 16>{}); break;
      case 32: with_type(a_tag, std::integral_constant<int, 32>{}); break;
      case 64: with_type(a_tag, std::integral_constant<int, 64>{}); break;
      case 128: with_type(a_tag, std::integral_constant<int, 128>{}); break;
      default: throw std::logic_error("attention (CUDA fused): unsupported head dimension");
    }
  };
  visit_activation(act, with_d);
}

// Stream-ordered float32 copies of bf16 tensors for the materialising fallback.
struct F32Copy {
  float* p = nullptr;
  cudaStream_t stream;
  F32Copy(const void* src, int64_t n, cudaStream_t s) : stream(s) {
    if (!src || n == 0) return;
    ATTN_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p), sizeof(float) * n, stream));
    cuda::launch_bf16_to_f32(static_cast<const __nv_bfloat16*>(src), p, n, stream);
  }
  F32Copy(const F32Copy&) = delete;
  F32Copy& operator=(const F32Copy&) = delete;
  ~F32Copy() {
    if (p) cudaFreeAsync(p, stream);
  }
};

}  // namespace attnsweep::cuda::fused
