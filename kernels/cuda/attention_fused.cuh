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
// About 570 lines: the forward and both backward kernels share the tile loads, the
// activation templates and the reductions, so they are one header.
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

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ void store_as(float* p, float v) {
  *p = v;
}
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16(v);
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

// Per key of a tile: 1 when it exists and key_mask lets it be attended.
template <int BN>
__device__ __forceinline__ void load_key_ok(float* kok, const MaskInfo& mask, int64_t b, int64_t k0, int krows) {
  for (int j = threadIdx.x; j < BN; j += kThreads) kok[j] = (j < krows && mask.key_allowed(b, k0 + j)) ? 1.0f : 0.0f;
}

// One past the last key query row i attends, 0 when it attends nothing (or i >= Nq):
// element (i, j) is live iff j < row_end(i) and key j's mask allows it.
__device__ __forceinline__ int64_t row_end(const MaskInfo& mask, int64_t b, int64_t i, int64_t& n_out) {
  n_out = 0;
  if (i >= mask.Nq) return 0;
  n_out = mask.n_attended(b, i);
  return n_out > 0 ? mask.key_end(i) : 0;
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

struct FwdArgs {
  ActivationSpec act;
  MaskInfo mask;
  int64_t H;
  float scale;
  bool norms;
  const void* Q;
  const void* K;
  const void* V;
  void* O;
  float* lse;
  double* row_attn;
  double* row_jac;
};

template <int D>
constexpr size_t fwd_smem_floats() {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  return size_t(BM) * (D + 1) + size_t(BN) * (D + 1) + size_t(BN) * D + size_t(BM) * (BN + 1) + BN;
}

// O [rows of this tile] = phi(Q K^T * scale) V, lse, per-row norm partials.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_forward_kernel(FwdArgs a) {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16, LDQ = D + 1, LDP = BN + 1;
  constexpr bool kSoftmax = A == Activation::softmax;
  extern __shared__ float smem[];
  float* Qs = smem;
  float* Ks = Qs + BM * LDQ;
  float* Vs = Ks + BN * LDQ;
  float* Ps = Vs + BN * D;
  float* kok = Ps + BM * LDP;

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t nqb = (Nq + BM - 1) / BM;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb, b = bh / a.H;
  const int64_t q0 = qb * BM;
  const int qrows = static_cast<int>(Nq - q0 < BM ? Nq - q0 : BM);
  const T* Qg = static_cast<const T*>(a.Q) + (bh * Nq + q0) * D;
  const T* Kg = static_cast<const T*>(a.K) + bh * Nk * D;
  const T* Vg = static_cast<const T*>(a.V) + bh * Nk * D;

  load_tile<D, LDQ, BM>(Qs, Qg, qrows);

  PhiParams pp[RM];
  int64_t end[RM];
  float m[RM], l[RM], n1[RM], n2[RM], acc[RM][RD];
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    int64_t n;
    end[r] = row_end(mask, b, q0 + ty + 16 * r, n);
    pp[r] = resolve_phi(a.act, n);
    m[r] = -INFINITY;
    l[r] = n1[r] = n2[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < RD; ++c) acc[r][c] = 0.0f;
  }

  // Keys beyond the last row's causal limit contribute nothing.
  int64_t kend = Nk;
  if (mask.causal) {
    const int64_t e = mask.key_end(q0 + qrows - 1);
    kend = e < 0 ? 0 : e;
  }
  for (int64_t k0 = 0; k0 < kend; k0 += BN) {
    const int krows = static_cast<int>(Nk - k0 < BN ? Nk - k0 : BN);
    __syncthreads();  // the previous tile's K, V, P are consumed
    load_tile<D, LDQ, BN>(Ks, Kg + k0 * D, krows);
    load_tile<D, D, BN>(Vs, Vg + k0 * D, krows);
    load_key_ok<BN>(kok, mask, b, k0, krows);
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
      if constexpr (kSoftmax) {
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < RN; ++c)
          if (live[c]) mx = fmaxf(mx, s[r][c]);
        const float m_new = fmaxf(m[r], half_warp_max(mx));
        // Nothing live so far in this row: keep everything at zero (and avoid inf - inf).
        const float alpha = m_new == -INFINITY ? 1.0f : __expf(m[r] - m_new);
        float ps = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma unroll
        for (int c = 0; c < RN; ++c) {
          const float p = live[c] ? __expf(s[r][c] - m_new) : 0.0f;
          s[r][c] = p;
          ps += p;
          p2 += p * p;
          p3 += p * p * p;
        }
        l[r] = l[r] * alpha + ps;
        if (a.norms) {
          n1[r] = n1[r] * alpha * alpha + p2;          // running sum p~^2
          n2[r] = n2[r] * alpha * alpha * alpha + p3;  // running sum p~^3
        }
#pragma unroll
        for (int c = 0; c < RD; ++c) acc[r][c] *= alpha;
        m[r] = m_new;
      } else {
#pragma unroll
        for (int c = 0; c < RN; ++c) {
          const float x = s[r][c];
          const float p = live[c] ? phi_t<A>(pp[r], x) : 0.0f;
          if (a.norms && live[c]) {
            const float g = dphi_t<A>(pp[r], x);
            n1[r] = fmaf(p, p, n1[r]);  // ||phi(S)||^2
            n2[r] = fmaf(g, g, n2[r]);  // ||phi'(S)||^2: the Jacobian is diagonal
          }
          s[r][c] = p;
        }
      }
#pragma unroll
      for (int c = 0; c < RN; ++c) Ps[(ty + 16 * r) * LDP + tx + 16 * c] = s[r][c];
    }
    __syncthreads();
    tile_accum<RM, RD, BN, LDP, D, true>(acc, Ps, Vs, ty, tx);  // acc += P V
  }

  T* Og = static_cast<T*>(a.O) + (bh * Nq + q0) * D;
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const int row = ty + 16 * r;
    float inv = 1.0f;
    double attn = 0.0, jac = 0.0;
    if constexpr (kSoftmax) {
      // Shuffles outside any row-dependent branch: the two half-warps may differ.
      const float z = half_warp_sum(l[r]);
      const float a2 = half_warp_sum(n1[r]), a3 = half_warp_sum(n2[r]);
      inv = z > 0.0f ? 1.0f / z : 0.0f;
      if (a.norms && z > 0.0f) {
        const RowNormSq rn = softmax_row_norms_from_sums(z, a2, a3);
        attn = rn.attn;
        jac = rn.jac;
      }
      if (a.lse && row < qrows && tx == 0) a.lse[bh * Nq + q0 + row] = z > 0.0f ? m[r] + logf(z) : -INFINITY;
    } else if (a.norms) {
      attn = half_warp_sum(n1[r]);
      jac = half_warp_sum(n2[r]);
    }
    if (row < qrows) {
#pragma unroll
      for (int c = 0; c < RD; ++c) store_as(Og + static_cast<int64_t>(row) * D + tx + 16 * c, acc[r][c] * inv);
      if (a.norms && tx == 0) {
        a.row_attn[bh * Nq + q0 + row] = attn;
        a.row_jac[bh * Nq + q0 + row] = jac;
      }
    }
  }
}

// Softmax backward: Dsum_i = dO_i . O_i (= sum_j P_ij dP_ij). One warp per row.
template <int D, class T>
__global__ void __launch_bounds__(kThreads)
    softmax_dsum_kernel(const T* __restrict__ O, const T* __restrict__ dO, float* __restrict__ Dsum, int64_t rows) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int k = lane; k < D; k += 32) acc = fmaf(to_f32(O[row * D + k]), to_f32(dO[row * D + k]), acc);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0) Dsum[row] = acc;
}

struct BwdArgs {
  ActivationSpec act;
  MaskInfo mask;
  int64_t H;
  float scale;
  const void* Q;
  const void* K;
  const void* V;
  const void* dO;
  const float* lse;
  const float* Dsum;
  void* dQ;
  void* dK;
  void* dV;
};

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

template <int D>
constexpr size_t dkdv_smem_floats() {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  return 2 * size_t(BN) * (D + 1) + 2 * size_t(BM) * (D + 1) + 2 * size_t(BM) * (BN + 1) + BN;
}

// dV = P^T dO and dK = dS^T Q * scale for one tile of BN keys, over all query tiles.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_dkdv_kernel(BwdArgs a) {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16, LD = D + 1, LDP = BN + 1;
  extern __shared__ float smem[];
  float* Ks = smem;
  float* Vs = Ks + BN * LD;
  float* Qs = Vs + BN * LD;
  float* dOs = Qs + BM * LD;
  float* Ps = dOs + BM * LD;
  float* dSs = Ps + BM * LDP;
  float* kok = dSs + BM * LDP;
  __shared__ PhiParams r_pp[BM];
  __shared__ int64_t r_end[BM];
  __shared__ float r_lse[BM], r_dsum[BM];

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t nkb = (Nk + BN - 1) / BN;
  const int64_t kb = blockIdx.x % nkb, bh = blockIdx.x / nkb, b = bh / a.H;
  const int64_t k0 = kb * BN;
  const int krows = static_cast<int>(Nk - k0 < BN ? Nk - k0 : BN);
  const T* Qg = static_cast<const T*>(a.Q) + bh * Nq * D;
  const T* dOg = static_cast<const T*>(a.dO) + bh * Nq * D;
  load_tile<D, LD, BN>(Ks, static_cast<const T*>(a.K) + (bh * Nk + k0) * D, krows);
  load_tile<D, LD, BN>(Vs, static_cast<const T*>(a.V) + (bh * Nk + k0) * D, krows);
  load_key_ok<BN>(kok, mask, b, k0, krows);

  float dK[RN][RD] = {}, dV[RN][RD] = {};
  // Causal: query i sees key k0 only when i + (Nk - Nq) >= k0.
  int64_t qstart = 0;
  if (mask.causal) {
    const int64_t first = k0 - (Nk - Nq);
    qstart = first > 0 ? first / BM * BM : 0;
  }
  for (int64_t q0 = qstart; q0 < Nq; q0 += BM) {
    const int qrows = static_cast<int>(Nq - q0 < BM ? Nq - q0 : BM);
    __syncthreads();  // previous Q, dO, P, dS consumed
    load_tile<D, LD, BM>(Qs, Qg + q0 * D, qrows);
    load_tile<D, LD, BM>(dOs, dOg + q0 * D, qrows);
    for (int i = threadIdx.x; i < BM; i += kThreads) {
      int64_t n;
      r_end[i] = row_end(mask, b, q0 + i, n);
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

  T* dKg = static_cast<T*>(a.dK) + (bh * Nk + k0) * D;
  T* dVg = static_cast<T*>(a.dV) + (bh * Nk + k0) * D;
#pragma unroll
  for (int r = 0; r < RN; ++r) {
    const int key = ty + 16 * r;
    if (key >= krows) continue;
#pragma unroll
    for (int c = 0; c < RD; ++c) {
      store_as(dKg + static_cast<int64_t>(key) * D + tx + 16 * c, dK[r][c] * a.scale);
      store_as(dVg + static_cast<int64_t>(key) * D + tx + 16 * c, dV[r][c]);
    }
  }
}

template <int D>
constexpr size_t dq_smem_floats() {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  return 2 * size_t(BM) * (D + 1) + 2 * size_t(BN) * (D + 1) + size_t(BM) * (BN + 1) + BN;
}

// dQ = dS K * scale for one tile of BM query rows, over all key tiles.
template <Activation A, int D, class T>
__global__ void __launch_bounds__(kThreads) fused_dq_kernel(BwdArgs a) {
  constexpr int BM = Tiles<D>::BM, BN = Tiles<D>::BN;
  constexpr int RM = BM / 16, RN = BN / 16, RD = D / 16, LD = D + 1, LDP = BN + 1;
  extern __shared__ float smem[];
  float* Qs = smem;
  float* dOs = Qs + BM * LD;
  float* Ks = dOs + BM * LD;
  float* Vs = Ks + BN * LD;
  float* dSs = Vs + BN * LD;
  float* kok = dSs + BM * LDP;

  const MaskInfo& mask = a.mask;
  const int64_t Nq = mask.Nq, Nk = mask.Nk;
  const int ty = threadIdx.x / 16, tx = threadIdx.x % 16;
  const int64_t nqb = (Nq + BM - 1) / BM;
  const int64_t qb = blockIdx.x % nqb, bh = blockIdx.x / nqb, b = bh / a.H;
  const int64_t q0 = qb * BM;
  const int qrows = static_cast<int>(Nq - q0 < BM ? Nq - q0 : BM);
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
    end[r] = row_end(mask, b, i, n);
    pp[r] = resolve_phi(a.act, n);
    lse[r] = a.lse && i < Nq ? a.lse[bh * Nq + i] : 0.0f;
    dsum[r] = a.Dsum && i < Nq ? a.Dsum[bh * Nq + i] : 0.0f;
  }
  int64_t kend = Nk;
  if (mask.causal) {
    const int64_t e = mask.key_end(q0 + qrows - 1);
    kend = e < 0 ? 0 : e;
  }
  for (int64_t k0 = 0; k0 < kend; k0 += BN) {
    const int krows = static_cast<int>(Nk - k0 < BN ? Nk - k0 : BN);
    __syncthreads();  // previous K, V, dS consumed
    load_tile<D, LD, BN>(Ks, Kg + k0 * D, krows);
    load_tile<D, LD, BN>(Vs, Vg + k0 * D, krows);
    load_key_ok<BN>(kok, mask, b, k0, krows);
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

  T* dQg = static_cast<T*>(a.dQ) + (bh * Nq + q0) * D;
#pragma unroll
  for (int r = 0; r < RM; ++r) {
    const int row = ty + 16 * r;
    if (row >= qrows) continue;
#pragma unroll
    for (int c = 0; c < RD; ++c) store_as(dQg + static_cast<int64_t>(row) * D + tx + 16 * c, dQ[r][c] * a.scale);
  }
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

template <class Kernel, class Args>
void launch(Kernel kernel, int64_t blocks, size_t smem_bytes, cudaStream_t stream, const Args& args) {
  if (blocks <= 0) return;
  if (blocks > (int64_t{1} << 31) - 1) throw std::invalid_argument("attention (CUDA fused): grid too large");
  ATTN_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes)));
  kernel<<<static_cast<unsigned>(blocks), kThreads, smem_bytes, stream>>>(args);
  ATTN_CUDA_CHECK_LAUNCH();
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
