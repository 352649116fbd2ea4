// AVX-512 GEMMs of kernels/cpu/gemm.h. Shapes of the reference cell: M = B*T = 6272 rows,
// K, N in {16 .. 256}; OpenBLAS spent a third of its time packing there (small K), so:
// - forward  out = inp @ W^T + bias and  dinp += dout @ W: W packed once per call into
//   K x 32 column panels (zero-padded), inp / dout read in place; a micro-tile is 8 rows x
//   32 columns, its 16 accumulators start at the bias (no separate bias pass).
// - dweight += dout^T @ inp: each 8 x 32 tile of dweight is reduced over all M rows by one
//   thread, rows in order, both operands read in place; the rows are walked in chunks
//   that stay in L2, the tile's partial sum parked in a scratch buffer between chunks
//   (the same FMA chain as one pass). dbias (column sums of dout, float64 as before) rides
//   along in the tiles of the first column panel.
// The functions with intrinsics carry target("avx512f"); OpenMP regions stay in plain
// functions that call them.
#include "kernels/cpu/gemm.h"
#include "base/options.h"
#include "kernels/cpu/aligned_scratch.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace attnsweep::cpu {

namespace {

#define GEMM_AVX512 __attribute__((target("avx512f")))

constexpr int64_t kMR = 8;             // rows of a micro-tile
constexpr int64_t kNR = 32;            // columns of a micro-tile (two zmm)
constexpr int64_t kRowGroup = 64;      // rows per parallel work item (forward / dinp)
constexpr int64_t kPrefetchRows = 8;   // dweight: rows of inp / dout fetched ahead
constexpr int64_t kDwChunkRows = 128;  // dweight_rows_partial_avx512: rows per pass of the tiles
constexpr int64_t kMaxDim = 2048;      // K, N beyond this: OpenBLAS (no K blocking here)

GemmPath initial_path() {
  return options::cpu_gemm_openblas() ? GemmPath::OpenBlas : GemmPath::Auto;
}

std::atomic<GemmPath>& path_ref() {
  static std::atomic<GemmPath> p{initial_path()};
  return p;
}

using Scratch = AlignedScratch;  // kernels/cpu/aligned_scratch.h

// Lane masks of a panel of w (1..32) columns.
inline __mmask16 mask_lo(int64_t w) {
  return w >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << w) - 1u);
}
inline __mmask16 mask_hi(int64_t w) {
  return w >= 32 ? __mmask16(0xFFFF) : (w > 16 ? __mmask16((1u << (w - 16)) - 1u) : __mmask16(0));
}

// ---- forward / dinp: C (MR x 32) = A (MR x K) @ Bp (K x 32 panel) -------------------
// acc starts at the bias (or 0), then acc += a[r][k] * b[k] for k = 0 .. K-1 in order;
// with add_c the finished acc is added to C (C += A @ B, as sgemm's beta = 1).
template <int MR>
GEMM_AVX512 void tile_ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int64_t K,
                         const float* bias, bool add_c, __mmask16 m0, __mmask16 m1) {
  // The tile's C lines are fetched while the FMAs run: with K ~ 64 the chain is short
  // and waiting for them after it (add_c's loads, the stores' RFOs) showed.
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + 16), _MM_HINT_T0);
  }
  __m512 acc0[MR], acc1[MR];
  const __m512 i0 = bias != nullptr ? _mm512_maskz_loadu_ps(m0, bias) : _mm512_setzero_ps();
  const __m512 i1 = bias != nullptr ? _mm512_maskz_loadu_ps(m1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) acc0[r] = i0, acc1[r] = i1;
  for (int64_t k = 0; k < K; ++k) {
    const __m512 b0 = _mm512_load_ps(bp + k * kNR);
    const __m512 b1 = _mm512_load_ps(bp + k * kNR + 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r * lda + k]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* cr = c + r * ldc;
    if (add_c) {
      acc0[r] = _mm512_add_ps(acc0[r], _mm512_maskz_loadu_ps(m0, cr));
      acc1[r] = _mm512_add_ps(acc1[r], _mm512_maskz_loadu_ps(m1, cr + 16));
    }
    _mm512_mask_storeu_ps(cr, m0, acc0[r]);
    _mm512_mask_storeu_ps(cr + 16, m1, acc1[r]);
  }
}

// rows (<= kRowGroup) of C (., N) from rows of A (., K) and the packed panels bp, panel p
// at bp + p ks 32 (ks >= K: panels packed deeper than the K rows used here).
GEMM_AVX512 void rows_ab(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int64_t K, int64_t N,
                         const float* bias, bool add_c, int64_t rows, int64_t ks) {
  for (int64_t j0 = 0; j0 < N; j0 += kNR) {
    const int64_t w = std::min(kNR, N - j0);
    const __mmask16 m0 = mask_lo(w), m1 = mask_hi(w);
    const float* panel = bp + (j0 / kNR) * ks * kNR;
    const float* bj = bias != nullptr ? bias + j0 : nullptr;
    int64_t r0 = 0;
    for (; r0 + kMR <= rows; r0 += kMR)
      tile_ab<8>(c + r0 * ldc + j0, ldc, a + r0 * lda, lda, panel, K, bj, add_c, m0, m1);
    float* ct = c + r0 * ldc + j0;
    const float* at = a + r0 * lda;
    switch (rows - r0) {
      case 7: tile_ab<7>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 6: tile_ab<6>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 5: tile_ab<5>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 4: tile_ab<4>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 3: tile_ab<3>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 2: tile_ab<2>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      case 1: tile_ab<1>(ct, ldc, at, lda, panel, K, bj, add_c, m0, m1); break;
      default: break;
    }
  }
}

// C (M, N) (+)= A (M, K) @ Bp + bias, rows split over the OpenMP team in groups.
void gemm_rows(float* c, const float* a, const float* bp, const float* bias, bool add_c, int64_t M, int64_t K,
               int64_t N, RowEpilogue epi) {
  const int64_t ng = (M + kRowGroup - 1) / kRowGroup;
  // Dynamic: a group's result does not depend on the thread that computes it, and on
  // shared cores a thread that loses its CPU for a while no longer holds up the others
  // at the end of a static share.
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t g = 0; g < ng; ++g) {
    const int64_t r0 = g * kRowGroup;
    const int64_t rows = std::min(kRowGroup, M - r0);
    rows_ab(c + r0 * N, N, a + r0 * K, K, bp, K, N, bias, add_c, rows, K);
    if (epi.fn != nullptr) epi.fn(epi.ctx, c, r0, rows);
  }
}

// Panels of B (K x N) for tile_ab: bp[p][k][j] = B[k][32 p + j], 0 beyond N. B is given by
// its element (k, j) at src[k * sk + j * sj].
void pack_panel(float* bp, const float* src, int64_t sk, int64_t sj, int64_t K, int64_t N, int64_t p, float scale) {
  float* dst = bp + p * K * kNR;
  const int64_t w = std::min(kNR, N - p * kNR);
  for (int64_t k = 0; k < K; ++k) {
    float* d = dst + k * kNR;
    if (scale == 1.0f)
      for (int64_t j = 0; j < w; ++j) d[j] = src[k * sk + (p * kNR + j) * sj];
    else
      for (int64_t j = 0; j < w; ++j) d[j] = scale * src[k * sk + (p * kNR + j) * sj];
    for (int64_t j = w; j < kNR; ++j) d[j] = 0.0f;
  }
}

void pack_b(float* bp, const float* src, int64_t sk, int64_t sj, int64_t K, int64_t N) {
  const int64_t np = (N + kNR - 1) / kNR;
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < np; ++p) pack_panel(bp, src, sk, sj, K, N, p, 1.0f);
}

// ---- dweight: DW (MR x 32) += sum_i dout[i][o0 .. o0+MR) x inp[i][c0 .. c0+32) --------
// One chunk of rows; acc starts at 0 (first chunk) or the parked partial sum, and after
// the last chunk is added to dweight. dbacc (may be null): float64 column sums of dout,
// 8 lanes (parked in the same way).
// Full: the panel is 32 columns wide (plain loads of inp, no mask registers in the loop);
// DB: dbacc is given (the dbias sums ride along). Both compile-time so that the row loop
// holds neither a mask reload nor a branch.
template <int MR, bool Full, bool DB>
GEMM_AVX512 void tile_dw(float* dw, float* part, int64_t ld, const float* dout, int64_t ldo, const float* inp,
                         int64_t ldi, int64_t rows, bool first, bool last, __mmask16 m0, __mmask16 m1, double* dbacc) {
  if constexpr (Full) m0 = m1 = __mmask16(0xFFFF);
  __m512 acc0[MR], acc1[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    acc0[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, part + r * ld);
    acc1[r] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, part + r * ld + 16);
  }
  const __m256i mo = _mm256_cmpgt_epi32(_mm256_set1_epi32(MR), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  __m512d db = first || !DB ? _mm512_setzero_pd() : _mm512_loadu_pd(dbacc);
  for (int64_t i = 0; i < rows; ++i) {
    const __m512 b0 = Full ? _mm512_loadu_ps(inp + i * ldi) : _mm512_maskz_loadu_ps(m0, inp + i * ldi);
    const __m512 b1 = Full ? _mm512_loadu_ps(inp + i * ldi + 16) : _mm512_maskz_loadu_ps(m1, inp + i * ldi + 16);
    const float* d = dout + i * ldo;
    _mm_prefetch(reinterpret_cast<const char*>(inp + (i + kPrefetchRows) * ldi), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(inp + (i + kPrefetchRows) * ldi + 16), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(d + kPrefetchRows * ldo), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 av = _mm512_set1_ps(d[r]);
      acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
      acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
    }
    if constexpr (DB) {  // a plain load when the tile spans 8 outputs (vmaskmovps is slow)
      const __m256 dv = MR == 8 ? _mm256_loadu_ps(d) : _mm256_maskload_ps(d, mo);
      db = _mm512_add_pd(db, _mm512_maskz_cvtps_pd(__mmask8(0xFF), dv));
    }
  }
  if constexpr (DB) _mm512_storeu_pd(dbacc, db);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    if (last) {
      float* w = dw + r * ld;
      _mm512_mask_storeu_ps(w, m0, _mm512_add_ps(_mm512_maskz_loadu_ps(m0, w), acc0[r]));
      _mm512_mask_storeu_ps(w + 16, m1, _mm512_add_ps(_mm512_maskz_loadu_ps(m1, w + 16), acc1[r]));
    } else {
      _mm512_mask_storeu_ps(part + r * ld, m0, acc0[r]);
      _mm512_mask_storeu_ps(part + r * ld + 16, m1, acc1[r]);
    }
  }
}

template <int MR>
GEMM_AVX512 void tile_dw_mr(float* dw, float* part, int64_t ld, const float* dout, int64_t ldo, const float* inp,
                            int64_t ldi, int64_t rows, bool first, bool last, __mmask16 m0, __mmask16 m1,
                            double* dbacc) {
  const bool full = m0 == __mmask16(0xFFFF) && m1 == __mmask16(0xFFFF);
  if (full) {
    if (dbacc != nullptr)
      tile_dw<MR, true, true>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc);
    else
      tile_dw<MR, true, false>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc);
  } else {
    if (dbacc != nullptr)
      tile_dw<MR, false, true>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc);
    else
      tile_dw<MR, false, false>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc);
  }
}

GEMM_AVX512 void tile_dw_any(int64_t mr, float* dw, float* part, int64_t ld, const float* dout, int64_t ldo,
                             const float* inp, int64_t ldi, int64_t rows, bool first, bool last, __mmask16 m0,
                             __mmask16 m1, double* dbacc) {
  switch (mr) {
    case 8: tile_dw_mr<8>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 7: tile_dw_mr<7>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 6: tile_dw_mr<6>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 5: tile_dw_mr<5>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 4: tile_dw_mr<4>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 3: tile_dw_mr<3>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 2: tile_dw_mr<2>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    case 1: tile_dw_mr<1>(dw, part, ld, dout, ldo, inp, ldi, rows, first, last, m0, m1, dbacc); break;
    default: break;
  }
}

// dweight (OC, C) += dout^T @ inp and dbias (OC) += colsum(dout) (dbias may be null).
void gemm_dweight(float* dweight, float* dbias, const float* dout, const float* inp, int64_t M, int64_t C, int64_t OC) {
  if (M <= 0) return;
  thread_local Scratch part_buf, db_buf;
  const int64_t to = (OC + kMR - 1) / kMR, tc = (C + kNR - 1) / kNR, ntiles = to * tc;
  const bool o_major = OC >= C;  // split the tiles along dout's columns (else inp's)
  // Rows per chunk: the chunk's dout and inp rows (~256 KiB) stay in L2 across the tiles.
  const int64_t chunk = std::max<int64_t>(64, (int64_t{1} << 16) / (OC + C));
  const int64_t nchunks = (M + chunk - 1) / chunk;
  float* part = nchunks > 1 ? part_buf.get(static_cast<size_t>(OC * C)) : nullptr;
  // float64 dbias sums, 8 per o-tile (padded), stored in a float buffer of twice the size.
  double* dbacc = dbias != nullptr ? reinterpret_cast<double*>(db_buf.get(static_cast<size_t>(2 * to * kMR))) : nullptr;
#pragma omp parallel
  {
    for (int64_t ch = 0; ch < nchunks; ++ch) {
      const int64_t i0 = ch * chunk, rows = std::min(chunk, M - i0);
      const bool first = ch == 0, last = ch == nchunks - 1;
      // The same static schedule in every chunk: a tile stays with its thread (OpenMP
      // guarantees the same assignment for equal loops), so no barrier is needed. Each
      // thread takes a contiguous range of tiles, split along the wider operand (dout's
      // OC columns or inp's C): a thread then pulls only its share of that operand's
      // lines from memory (dealt round-robin, both threads read every line of both).
      // Within a range the tiles sharing the narrower operand's slice run one after
      // another, so that slice stays in L1 across them.
#pragma omp for schedule(static) nowait
      for (int64_t t = 0; t < ntiles; ++t) {
        const int64_t ot = o_major ? t / tc : t % to, ct = o_major ? t % tc : t / to;
        const int64_t o0 = ot * kMR, c0 = ct * kNR;
        const int64_t w = std::min(kNR, C - c0);
        tile_dw_any(std::min(kMR, OC - o0), dweight + o0 * C + c0, part != nullptr ? part + o0 * C + c0 : nullptr, C,
                    dout + i0 * OC + o0, OC, inp + i0 * C + c0, C, rows, first, last, mask_lo(w), mask_hi(w),
                    dbacc != nullptr && c0 == 0 ? dbacc + o0 : nullptr);
      }
    }
  }
  if (dbias != nullptr)
    for (int64_t o = 0; o < OC; ++o) dbias[o] += static_cast<float>(dbacc[o]);
}

}  // namespace

void set_gemm_path(GemmPath path) {
  path_ref().store(path);
}
GemmPath gemm_path() {
  return path_ref().load();
}

bool gemm_avx512_supported() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

bool gemm_avx512_usable(int64_t K, int64_t N) {
  return gemm_path() == GemmPath::Auto && gemm_avx512_supported() && K >= 1 && N >= 1 && K <= kMaxDim && N <= kMaxDim;
}

// B = weight^T (C x OC): element (k, j) = weight[j * C + k].
void pack_weight_forward(float* bp, const float* weight, int64_t C, int64_t OC) {
  pack_b(bp, weight, 1, C, C, OC);
}

void matmul_forward_avx512(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                           int64_t OC, RowEpilogue epi) {
  thread_local Scratch packed;
  float* bp = packed.get(static_cast<size_t>(panels_floats(C, OC)));
  pack_weight_forward(bp, weight, C, OC);
  gemm_rows(out, inp, bp, bias, false, N, C, OC, epi);
}

namespace {
// Rows [r0, r0 + rows) of C (ldc) from A (lda) and panels bp of depth ks (K rows used), in
// groups of kRowGroup rows on the calling thread, the epilogue after each group: the
// serial counterpart of gemm_rows (a row's value does not depend on its group: one FMA
// chain per element in a fixed k order).
void row_groups(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int64_t ks, int64_t K, int64_t N,
                const float* bias, bool add_c, int64_t r0, int64_t rows, RowEpilogue epi) {
  for (int64_t g0 = r0; g0 < r0 + rows; g0 += kRowGroup) {
    const int64_t n = std::min(kRowGroup, r0 + rows - g0);
    rows_ab(c + g0 * ldc, ldc, a + g0 * lda, lda, bp, K, N, bias, add_c, n, ks);
    if (epi.fn != nullptr) epi.fn(epi.ctx, c, g0, n);
  }
}
}  // namespace

void matmul_rows_avx512(float* out, const float* inp, const float* bp, const float* bias, int64_t r0, int64_t rows,
                        int64_t C, int64_t OC, RowEpilogue epi) {
  row_groups(out, OC, inp, C, bp, C, C, OC, bias, false, r0, rows, epi);
}

// dinp (N, C) = dout (N, OC) @ weight (OC, C): B = weight, element (k, j) = weight[k * C + j].
void pack_weight_dinp(float* bp, const float* weight, int64_t C, int64_t OC) {
  pack_b(bp, weight, C, 1, OC, C);
}

int64_t dbias_partial_doubles(int64_t OC) {
  return (OC + kMR - 1) / kMR * kMR;
}

void dweight_rows_partial_avx512(float* part, double* dbpart, const float* dout, const float* inp, int64_t r0,
                                 int64_t rows, int64_t C, int64_t OC) {
  if (rows <= 0) {
    std::fill(part, part + OC * C, 0.0f);
    if (dbpart != nullptr) std::fill(dbpart, dbpart + dbias_partial_doubles(OC), 0.0);
    return;
  }
  // Chunks of kDwChunkRows rows: a tile reads its inp slice (chunk x 32 floats) and one
  // line of dout per row, ~16 + 8 KiB, which with C = 64 stays in L1 across the o-tiles;
  // over a whole block (245 rows, ~47 KiB) the slice and the dout lines evicted each
  // other (5-8 % slower measured alone). Each chunk continues the tile's chain from its
  // parked value (first chunk from zero), so the sums are those of one pass.
  for (int64_t i0 = 0; i0 < rows; i0 += kDwChunkRows) {
    const int64_t n = std::min(kDwChunkRows, rows - i0);
    // Tiles sharing inp's column slice run one after another (the slice stays in L1).
    for (int64_t c0 = 0; c0 < C; c0 += kNR) {
      const int64_t w = std::min(kNR, C - c0);
      for (int64_t o0 = 0; o0 < OC; o0 += kMR)
        tile_dw_any(std::min(kMR, OC - o0), part + o0 * C + c0, part + o0 * C + c0, C, dout + (r0 + i0) * OC + o0, OC,
                    inp + (r0 + i0) * C + c0, C, n, i0 == 0, false, mask_lo(w), mask_hi(w),
                    dbpart != nullptr && c0 == 0 ? dbpart + o0 : nullptr);
    }
  }
}

int64_t panels_floats(int64_t K, int64_t N) {
  return (N + kNR - 1) / kNR * kNR * K;
}

void pack_panels(float* bp, const float* src, int64_t sk, int64_t sj, int64_t K, int64_t N, float scale) {
  for (int64_t p = 0; p < (N + kNR - 1) / kNR; ++p) pack_panel(bp, src, sk, sj, K, N, p, scale);
}

void gemm_rows_panels(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int64_t ks, int64_t K,
                      int64_t N, int64_t rows, bool add_c) {
  row_groups(c, ldc, a, lda, bp, ks, K, N, nullptr, add_c, 0, rows, {});
}

void gemm_at_b_add(float* dw, int64_t ld, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                   int64_t M, int64_t N) {
  if (rows <= 0) return;
  // Tiles sharing b's column slice run one after another (the slice stays in L1).
  for (int64_t c0 = 0; c0 < N; c0 += kNR) {
    const int64_t w = std::min(kNR, N - c0);
    for (int64_t o0 = 0; o0 < M; o0 += kMR)
      tile_dw_any(std::min(kMR, M - o0), dw + o0 * ld + c0, nullptr, ld, a + o0, lda, b + c0, ldb, rows, true, true,
                  mask_lo(w), mask_hi(w), nullptr);
  }
}

void matmul_backward_avx512(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int64_t N, int64_t C, int64_t OC, RowEpilogue dinp_epi,
                            bool dinp_overwrite) {
  if (dinp != nullptr) {
    thread_local Scratch packed;
    // dinp (N, C) += dout (N, OC) @ weight (OC, C): B = weight, element (k, j) = weight[k * C + j].
    float* bp = packed.get(static_cast<size_t>((C + kNR - 1) / kNR * kNR * OC));
    pack_b(bp, weight, C, 1, OC, C);
    gemm_rows(dinp, dout, bp, nullptr, !dinp_overwrite, N, OC, C, dinp_epi);
  }
  gemm_dweight(dweight, dbias, dout, inp, N, C, OC);
}

}  // namespace attnsweep::cpu
