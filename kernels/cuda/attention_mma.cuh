// Tensor-core attention forward (issue #19, step 1): FlashAttention-2 style on
// mma.sync.aligned.m16n8k16 (bf16 or fp16 operands, fp32 accumulators), ldmatrix
// (.trans for V), cp.async double-buffered K/V tiles, the Q tile in registers.
//
// STATUS: COMPILED ONLY, NEVER RUN ON A GPU. Nothing here has executed; the fragment
// layouts, the ldmatrix addressing and the masking were checked by reading against the
// PTX ISA, not by running. tests/unit/test_attention_cuda.cpp (AttentionCudaMma*) is the
// check for the first GPU session; tests/sass/check_mma_sass.sh (a ctest that runs on
// CPU machines) checks that these kernels contain HMMA and spill nothing.
//
// What it computes: exactly what fused_forward_kernel (attention_fused.cuh) computes,
// for Q, K, V, O of type bf16 or fp16, d = dv in {64, 128}:
//   s_ij = (q_i . k_j) * scale; live(i, j) = j < key_end(i) and key_mask[b, j] != 0;
//   n_i = the row's attended key count (MaskInfo::n_attended), phi resolved per row with
//   resolve_phi(act, n_i) (the N of the scale and of the sigmoid bias);
//   softmax:      O_i = sum_j exp(s_ij - m_i) v_j / sum_j exp(s_ij - m_i) (online
//                 rescaling, exp2 with log2(e) folded into the scale), lse_i in natural
//                 units (-inf for an empty row, whose O row is 0);
//   element-wise: O_i = sum_j phi(s_ij) v_j (no normalisation, no rescaling);
//   dead (i, j): contribute 0 to O and to both norms.
// Norms (template flag): per thread fp32 sums (softmax: running sum p~^2, p~^3 rescaled
// like l; element-wise: phi^2 and phi'^2 of live entries), reduced over the 4 lanes of a
// quad by xor-shuffles (1 then 2: every lane gets the same bits), written per row as
// float64 and reduced by launch_norm_reduce in a fixed order: deterministic.
// phi is evaluated in fp32 on the fp32 scores; P is rounded to the input type for the
// P V product (fp16: |phi| must stay below 65504, true for softmax, sigmoid, and for
// poly / relu at the scores the trainer sees; bf16 has float32's range).
//
// Design. 4 warps (128 threads) own BM = 64 query rows, 16 per warp (one m16 tile); keys
// stream in tiles of BN = 64. Per warp and key tile: S (16 x 64) = 8 n-tiles of m16n8k16
// over d/16 k-steps (Q fragments in registers, loaded once with ldmatrix.x4; K
// fragments by ldmatrix.x4 from shared memory: two n-tiles x two k-halves per call); the
// S accumulators become the A operand of P V directly (the C fragment of n-tiles 2k and
// 2k+1 is the A fragment of k-step k: FA2's register reuse, no shared-memory round
// trip); V fragments by ldmatrix.x4.trans. Row statistics live in the 4 lanes of a quad
// (C fragment rows groupID and groupID + 8).
// Shared memory (element type T, rows padded by 8 elements = 16 bytes, so the 8 row
// addresses of every ldmatrix 8x8 matrix fall in 8 distinct 16-byte bank groups):
//   Qs[64][d+8], Ks[2][64][d+8], Vs[2][64][d+8], key-mask flags kok[2][64] (float).
//   d = 64: 46,592 bytes; d = 128: 87,552 bytes (dynamic, above 48 KB by attribute).
// Pipeline: cp.async.cg 16-byte copies (zero-filled beyond the last row: a partial tile
// holds zeros, never stale data, so P = 0 times V = 0), one commit group per tile, two
// stages: tile t+1 is in flight while tile t is computed.
// Causal: the block stops at the key tile of its last row's key_end; the diagonal tiles
// are masked per element by key_end(i).
//
// The backward on tensor cores is attention_mma_bwd.cuh (bf16; compiled only, reached
// through attention_backward_cuda_mma); the fused CUDA-core backward also runs from this
// forward's O and lse. Not yet done (issue #19): fp16 backward, the Hopper wgmma/TMA
// path (sm_90a), a shared-memory-staged coalesced O store, d = 8/16/32 on tensor cores,
// making these the default of attention_forward_cuda / attention_backward_cuda (bf16).
//
// Resources, measured (cuobjdump -res-usage of the built library, CUDA 13.0, sm_90,
// 2026-12-02 after the split into forced-inline steps: every registry activation, poly
// at degrees 1..4 and run-time; tests/sass/check_mma_sass.sh prints them per kernel):
// each of the 72 forward kernels has 0 bytes stack frame, 0 spill stores / loads, no
// LDL/STL, HMMA.16816.F32.* 64 (d = 64) or 128 (d = 128) per key-tile iteration, LDSM
// (ldmatrix) and LDGSTS (cp.async.cg 16 bytes). Registers per thread (bf16 and fp16
// identical), norms off / on:
//                      d = 64      d = 128
//   softmax            163 / 161   232 / 238
//   poly degree 1..4   144-151 / 182-196   215-218 / 254-255
//   poly, run-time deg 158 / 164   215 / 222
//   relu               156 / 182   220 / 254
//   relu2              156 / 196   228 / 255
//   sigmoid            156 / 160   215 / 220
// (Before the split, 2026-12-01: within -6..+14 of these; the split made the compiler
// predicate the key-flag tests instead of branching around them: forward 0.85-1.01x
// the instructions, dK/dV 0.88-1.03x, dQ 0.92-0.95x, the same HMMA count.)
// d = 128 with norms sits at the 255-register limit (no spill yet): a larger tile or one
// more live value there will spill, and the SASS test will say so.
// At 128 threads a block, <= 255 registers and 87.5 KB of shared memory (d = 128), two
// blocks (8 warps) fit an SM; d = 64 (<= 196 registers, 46 KB): two.
// A build with -DATTNSWEEP_MMA_MIN_BLOCKS=8 (64 registers) spills 1-1.2 KB of stack per
// kernel (~700 LDL/STL): the SASS test fails on it, as it must (seen 2026-12-01).
// Build time (nvcc -O3 sm_90, measured at 14 kernels a file, now 18): attention_mma_fwd_d64_bf16.cu 7.9 s and
// attention_mma_fwd_d128_bf16.cu 8.4 s on an idle core; with both cores of the build
// machine busy 26 s (d64_f16) and 34 s (d128_f16), attention_mma_entry.cu (host entry) 10.5 s.
// About 35 s of one core in all; the four instantiation files build in parallel.
#pragma once

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/ptx.cuh"

#include <cuda_fp16.h>

#include <cstdint>
#include <stdexcept>
#include <type_traits>

namespace attnsweep::cuda::mma {

// Minimum resident blocks per SM in __launch_bounds__: 1 (the compiler may use up to 255
// registers). A build with -DATTNSWEEP_MMA_MIN_BLOCKS=8 caps the kernels at 64 registers
// and forces spills: how tests/sass/check_mma_sass.sh was seen to fail.
#ifndef ATTNSWEEP_MMA_MIN_BLOCKS
#define ATTNSWEEP_MMA_MIN_BLOCKS 1
#endif

inline constexpr int kWarps = 4;
inline constexpr int kThreads = 32 * kWarps;
inline constexpr int kBM = 16 * kWarps;  // query rows per block
inline constexpr int kBN = 64;           // keys per tile

template <int D>
struct Geom {
  static_assert(D % 16 == 0 && D >= 16);
  static constexpr int LD = D + 8;  // padded row stride, elements
};

// The forward kernel's dynamic shared memory, one layout for the kernel's pointers and the
// launch's size: Q of the block's queries [kBM][LD]; K and V double-buffered [2][kBN][LD];
// which keys of each K tile are live [2][kBN] floats.
template <int D, class T>
struct FwdSmem {
  static constexpr int LD = Geom<D>::LD;
  static constexpr size_t bytes() {
    return (size_t(kBM) + 4 * size_t(kBN)) * LD * sizeof(T) + 2 * size_t(kBN) * sizeof(float);
  }
  T *Qs, *Ks, *Vs;
  float* kok;
  __device__ explicit FwdSmem(unsigned char* p)
      : Qs(reinterpret_cast<T*>(p)),
        Ks(Qs + kBM * LD),
        Vs(Ks + 2 * kBN * LD),
        kok(reinterpret_cast<float*>(Vs + 2 * kBN * LD)) {}
};

// The PTX (cp.async, ldmatrix, mma.sync, ex2): kernels/cuda/ptx.cuh.

// Two floats as one 32-bit register of T pairs: lo in the low half (the lower column).
template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_xor_sync(0xffffffffu, v, 2);
  return v;
}
__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
  return v;
}

// ROWS x D tile (global row stride D) into shared (row stride LD) by 16-byte cp.async;
// rows at and beyond `valid` are zero-filled (their source address is row 0's, valid).
template <int D, int ROWS, class T>
__device__ __forceinline__ void async_tile(T* __restrict__ dst, const T* __restrict__ src, int valid) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  constexpr int LD = Geom<D>::LD;
  static_assert(ROWS * CH % kThreads == 0);
#pragma unroll
  for (int it = 0; it < ROWS * CH / kThreads; ++it) {
    const int idx = it * kThreads + static_cast<int>(threadIdx.x);
    const int r = idx / CH, c = idx % CH;
    const bool ok = r < valid;
    cp_async16(dst + r * LD + c * 8, src + static_cast<int64_t>(ok ? r : 0) * D + c * 8, ok ? 16 : 0);
  }
}

// ---- the steps the kernels share ---------------------------------------------------------

// The two query rows a thread holds in the C fragments (h = 0: groupID, h = 1: groupID + 8
// of its warp's 16, the first at row0): their resolved phi and key limit (row_end).
struct QuadRows {
  PhiParams pp[2];
  int64_t end[2];
  __device__ __forceinline__ QuadRows(const MaskInfo& mask, const ActivationSpec& act, int64_t b, int64_t row0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int64_t n;
      end[h] = mask.row_end(b, row0 + 8 * h, n);
      pp[h] = resolve_phi(act, n);
    }
  }
};

// Which elements of key tile k0 are live for a thread's two rows. Element e of n-tile j:
// row h = e >> 1, key column 8 j + 2 tq + (e & 1) of the tile; live iff the column is
// below the row's limit (its key_end and Nk, relative to the tile) and the key mask
// allows the key (flags: the tile's key flags, read only when has_mask).
struct TileLive {
  int lim[2];
  const float* flags;
  bool has_mask;
  int tq;
  __device__ __forceinline__ TileLive(const int64_t (&end)[2], int64_t k0, const float* flags_, bool has_mask_, int tq_)
      : flags(flags_), has_mask(has_mask_), tq(tq_) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t r = end[h] - k0;
      lim[h] = r < 0 ? 0 : (r > kBN ? kBN : static_cast<int>(r));
    }
  }
  __device__ __forceinline__ bool operator()(int j, int e) const {
    const int col = 8 * j + 2 * tq + (e & 1);
    return col < lim[e >> 1] && (!has_mask || flags[col] != 0.0f);
  }
};

// Key tile t (K and V rows, and with a key mask their flags) into stage t & 1.
template <int D, class T>
__device__ __forceinline__ void issue_kv_tile(T* Ks, T* Vs, float* flags, const T* Kg, const T* Vg,
                                              const MaskInfo& mask, int64_t b, int t) {
  constexpr int LD = Geom<D>::LD;
  const int64_t k0 = int64_t(t) * kBN;
  const int st = t & 1;
  const int krows = tile_rows(mask.Nk, k0, kBN);
  async_tile<D, kBN>(Ks + st * kBN * LD, Kg + k0 * D, krows);
  async_tile<D, kBN>(Vs + st * kBN * LD, Vg + k0 * D, krows);
  if (mask.key_mask != nullptr) load_key_flags<kBN, kThreads>(flags + st * kBN, mask, b, k0, krows);
}

// The two-stage cp.async loop over ntiles tiles: issue(t + 1) is in flight while
// body(t, stage) computes tile t. The caller has issued and committed tile 0; one commit
// group per iteration (empty ones too), so wait_group 1 means "tile t has landed".
template <class Issue, class Body>
__device__ __forceinline__ void pipelined_tiles(int ntiles, const Issue& issue, const Body& body) {
  for (int t = 0; t < ntiles; ++t) {
    if (t + 1 < ntiles) issue(t + 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    body(t, t & 1);
    __syncthreads();  // stage t & 1 is free for tile t + 2
  }
  cp_async_wait<0>();
}

// S (16 x 64 per warp, 8 n-tiles) = Q K^T with the warp's Q fragments in registers (qf,
// one per k-step) and the key tile in shared memory (Kst, [kBN][LD]).
template <int D, class T>
__device__ __forceinline__ void mma_qk(float (&s)[kBN / 8][4], const uint32_t (&qf)[D / 16][4], const T* Kst,
                                       int lane) {
  constexpr int LD = Geom<D>::LD;
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int nn = 0; nn < kBN / 16; ++nn) {
      uint32_t kf[4];
      ldmatrix_x4(kf, Kst + (nn * 16 + (lane & 7) + (lane >> 4) * 8) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
      mma16816<T>(s[2 * nn], qf[kk], kf[0], kf[1]);
      mma16816<T>(s[2 * nn + 1], qf[kk], kf[2], kf[3]);
    }
  }
}

// out (16 x D per warp) += P (16 x 64, the accumulators of mma_qk / mma_abt, rounded to
// T) times X (64 rows [.][LD], the reduction index first): the forward's O += P V. The
// C fragments of n-tiles 2k, 2k+1 are the A fragment of k-step k.
template <int D, class T>
__device__ __forceinline__ void mma_px(float (&out)[D / 8][4], const float (&p)[kBN / 8][4], const T* x_rows,
                                       int lane) {
  constexpr int LD = Geom<D>::LD;
#pragma unroll
  for (int kk = 0; kk < kBN / 16; ++kk) {
    const uint32_t pa[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]), pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                            pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
    for (int dn = 0; dn < D / 16; ++dn) {
      uint32_t xf[4];
      ldmatrix_x4_trans(xf, x_rows + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + dn * 16 + (lane >> 4) * 8);
      mma16816<T>(out[2 * dn], pa, xf[0], xf[1]);
      mma16816<T>(out[2 * dn + 1], pa, xf[2], xf[3]);
    }
  }
}

// One row of a warp's accumulator tile to global memory: C-fragment row h (0: groupID,
// 1: groupID + 8) of the OT n-tiles, this thread's columns 8 j + 2 tq and + 1, times
// mul, rounded to T as one 32-bit pair each, into the global row that starts at grow.
template <int OT, class T>
__device__ __forceinline__ void store_acc_row(T* grow, const float (&acc)[OT][4], int h, int tq, float mul) {
#pragma unroll
  for (int j = 0; j < OT; ++j)
    *reinterpret_cast<uint32_t*>(grow + 8 * j + 2 * tq) = pack2<T>(acc[j][2 * h] * mul, acc[j][2 * h + 1] * mul);
}

// A warp's whole accumulator tile (16 rows of D from warp * 16 of the block's tile, those
// below `valid`) times mul into global rows of D elements from g (the tile's first row):
// the backward's dK, dV and dQ.
template <int D, class T>
__device__ __forceinline__ void store_acc_tile(T* g, const float (&acc)[D / 8][4], int warp, int lane, int valid,
                                               float mul) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp * 16 + (lane >> 2) + 8 * h;
    if (row < valid) store_acc_row<D / 8, T>(g + static_cast<int64_t>(row) * D, acc, h, lane & 3, mul);
  }
}

// ---- the forward kernel ------------------------------------------------------------------

// The running state of a thread's two rows: softmax's maximum m (log2 units), sum l and
// sums of p~^2 (n1) and p~^3 (n2); element-wise, ||phi||^2 (n1) and ||phi'||^2 (n2).
// o: the O accumulators (OT n-tiles of 8 columns).
template <int OT>
struct FwdState {
  float m[2], l[2], n1[2], n2[2];
  float o[OT][4];
  __device__ __forceinline__ FwdState() {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m[h] = -INFINITY;
      l[h] = n1[h] = n2[h] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < OT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
  }
};

// Softmax on one tile: s (scores, scaled by sc = scale * log2(e) here) becomes
// p~ = 2^(s - m_new), dead entries -inf first so they give 0; l, n1, n2 and o rescale.
template <bool Norms, int OT>
__device__ __forceinline__ void softmax_tile(float (&s)[kBN / 8][4], const TileLive& live, float sc, FwdState<OT>& f) {
  constexpr int NT = kBN / 8;
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[j][e] = live(j, e) ? s[j][e] * sc : -INFINITY;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = f.m[h];
#pragma unroll
    for (int j = 0; j < NT; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * h], s[j][2 * h + 1]));
    const float m_new = quad_max(mx);
    // Nothing live so far in this row: m stays -inf, p = ex2(-inf - 0) = 0 and
    // alpha = 1 (no inf - inf).
    const float m_use = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = m_new == -INFINITY ? 1.0f : ex2(f.m[h] - m_new);
    float ps = 0.0f, p2 = 0.0f, p3 = 0.0f;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const float p = ex2(s[j][e] - m_use);
        s[j][e] = p;
        ps += p;
        if constexpr (Norms) {
          p2 = fmaf(p, p, p2);
          p3 = fmaf(p * p, p, p3);
        }
      }
    f.l[h] = fmaf(f.l[h], alpha, ps);
    if constexpr (Norms) {
      f.n1[h] = fmaf(f.n1[h], alpha * alpha, p2);
      f.n2[h] = fmaf(f.n2[h], alpha * alpha * alpha, p3);
    }
#pragma unroll
    for (int j = 0; j < OT; ++j) {
      f.o[j][2 * h] *= alpha;
      f.o[j][2 * h + 1] *= alpha;
    }
    f.m[h] = m_new;
  }
}

// An element-wise phi on one tile: s (scores; sc = scale) becomes phi(s * sc), 0 where
// dead; n1, n2 gather ||phi(S)||^2 and ||phi'(S)||^2 (the Jacobian is diagonal).
template <Activation A, int Deg, bool Norms, int OT>
__device__ __forceinline__ void phi_tile(float (&s)[kBN / 8][4], const TileLive& live, float sc, const QuadRows& rows,
                                         FwdState<OT>& f) {
  auto exp_fn = [](float v) { return __expf(v); };
#pragma unroll
  for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int h = e >> 1;
      const bool ok = live(j, e);
      const float x = s[j][e] * sc;
      const float p = ok ? phi_fixed<A, Deg>(rows.pp[h], x, exp_fn) : 0.0f;
      if constexpr (Norms) {
        const float gd = ok ? dphi_fixed<A, Deg>(rows.pp[h], x, exp_fn) : 0.0f;
        f.n1[h] = fmaf(p, p, f.n1[h]);
        f.n2[h] = fmaf(gd, gd, f.n2[h]);
      }
      s[j][e] = p;
    }
}

// The epilogue: quad reductions (outside any row-dependent branch), O, lse, row norms.
template <Activation A, int D, class T, bool Norms>
__device__ __forceinline__ void forward_store(const FwdArgs& a, const QueryBlock<kBM>& blk, int warp, int lane,
                                              const FwdState<D / 8>& f) {
  const int g = lane >> 2, tq = lane & 3;
  const int64_t Nq = a.mask.Nq;
  T* Og = static_cast<T*>(a.O) + (blk.bh * Nq + blk.q0) * D;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = warp * 16 + g + 8 * h;
    float inv = 1.0f;
    double attn = 0.0, jac = 0.0;
    if constexpr (A == Activation::softmax) {
      const float z = quad_sum(f.l[h]);
      inv = z > 0.0f ? 1.0f / z : 0.0f;
      if constexpr (Norms) {
        const float a2 = quad_sum(f.n1[h]), a3 = quad_sum(f.n2[h]);
        if (z > 0.0f) {
          const RowNormSq rn = softmax_row_norms_from_sums(z, a2, a3);
          attn = rn.attn;
          jac = rn.jac;
        }
      }
      if (a.lse && row < blk.rows && tq == 0)
        a.lse[blk.bh * Nq + blk.q0 + row] = z > 0.0f ? f.m[h] * 0.6931471805599453f + logf(z) : -INFINITY;
    } else if constexpr (Norms) {
      attn = quad_sum(f.n1[h]);
      jac = quad_sum(f.n2[h]);
    }
    if (row < blk.rows) {
      store_acc_row<D / 8, T>(Og + static_cast<int64_t>(row) * D, f.o, h, tq, inv);
      if constexpr (Norms) {
        if (tq == 0) {
          a.row_attn[blk.bh * Nq + blk.q0 + row] = attn;
          a.row_jac[blk.bh * Nq + blk.q0 + row] = jac;
        }
      }
    }
  }
}

template <Activation A, int Deg, int D, class T, bool Norms>
__global__ void __launch_bounds__(kThreads, ATTNSWEEP_MMA_MIN_BLOCKS) mma_forward_kernel(FwdArgs a) {
  constexpr int LD = Geom<D>::LD;
  ATTN_DYNAMIC_SHARED(unsigned char, smem_raw);
  const FwdSmem<D, T> sm(smem_raw);
  T *const Qs = sm.Qs, *const Ks = sm.Ks, *const Vs = sm.Vs;
  float* const kok = sm.kok;

  const MaskInfo& mask = a.mask;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const QueryBlock<kBM> blk(mask, a.H);
  const T* Kg = static_cast<const T*>(a.K) + blk.bh * mask.Nk * D;
  const T* Vg = static_cast<const T*>(a.V) + blk.bh * mask.Nk * D;
  const int ntiles = static_cast<int>((blk.kend + kBN - 1) / kBN);
  auto issue = [&](int t) { issue_kv_tile<D>(Ks, Vs, kok, Kg, Vg, mask, blk.b, t); };

  async_tile<D, kBM>(Qs, static_cast<const T*>(a.Q) + (blk.bh * mask.Nq + blk.q0) * D, blk.rows);
  cp_async_commit();  // group: Q
  if (ntiles > 0) issue(0);
  cp_async_commit();  // group: tile 0

  const QuadRows rows(mask, a.act, blk.b, blk.q0 + warp * 16 + (lane >> 2));
  FwdState<D / 8> f;
  cp_async_wait<1>();  // Q has landed (tile 0 may still be in flight)
  __syncthreads();
  uint32_t qf[D / 16][4];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(qf[kk], Qs + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * LD + kk * 16 + (lane >> 4) * 8);

  const float sc = A == Activation::softmax ? a.scale * 1.4426950408889634f : a.scale;
  pipelined_tiles(ntiles, issue, [&](int t, int st) {
    float s[kBN / 8][4];
    mma_qk<D, T>(s, qf, Ks + st * kBN * LD, lane);  // S = Q K^T (16 x 64 per warp)
    const TileLive live(rows.end, int64_t(t) * kBN, kok + st * kBN, mask.key_mask != nullptr, lane & 3);
    if constexpr (A == Activation::softmax)
      softmax_tile<Norms>(s, live, sc, f);
    else
      phi_tile<A, Deg, Norms>(s, live, sc, rows, f);
    mma_px<D, T>(f.o, s, Vs + st * kBN * LD, lane);  // O += P V
  });
  forward_store<A, D, T, Norms>(a, blk, warp, lane, f);
}

// ---- host side ------------------------------------------------------------------------

template <Activation A, int Deg, int D, class T, bool Norms>
void launch_forward(const FwdArgs& args, int64_t blocks, cudaStream_t stream) {
  launch_blocks("attention (CUDA mma)", mma_forward_kernel<A, Deg, D, T, Norms>, blocks, kThreads,
                FwdSmem<D, T>::bytes(), stream, args);
}

// Every variant of one (D, T): each activation of the registry (kernels/activation.h;
// poly with degrees 1..kFixedDegrees fixed and any other at run time); norms on or off.
// One of these per .cu file.
template <int D, class T>
void forward_variants(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream) {
  auto with_norms = [&](auto a_tag, auto deg_tag) {
    constexpr Activation A = decltype(a_tag)::value;
    constexpr int Deg = decltype(deg_tag)::value;
    if (norms)
      launch_forward<A, Deg, D, T, true>(args, blocks, stream);
    else
      launch_forward<A, Deg, D, T, false>(args, blocks, stream);
  };
  dispatch_activation(args.act, with_norms);  // every activation of the registry
}

// Defined one per file (attention_mma_fwd_d{64,128}_{bf16,f16}.cu).
void forward_d64_bf16(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream);
void forward_d64_f16(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream);
void forward_d128_bf16(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream);
void forward_d128_f16(const FwdArgs& args, bool norms, int64_t blocks, cudaStream_t stream);

}  // namespace attnsweep::cuda::mma
