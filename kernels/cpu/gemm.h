// Hand-written AVX-512 GEMMs for the trainer's matmuls (kernels/ops.h matmul_forward /
// matmul_backward), llm.c / BLIS style: a 8 x 32 register micro-kernel (16 zmm
// accumulators), the small weight packed once per call, the big activations read in
// place. Every output element is one float32 FMA chain in a fixed k order computed by
// one thread, so results do not depend on the thread count nor on the tiling.
// Internal to kernels/cpu: the matmuls (kernels/cpu/matmul.cpp) dispatch here when gemm_avx512_usable() says so and
// falls back to OpenBLAS otherwise (CPUs without AVX-512, shapes outside the intended
// range, or ATTNSWEEP_CPU_GEMM=openblas in the environment).
#pragma once

#include <cstdint>

namespace attnsweep::cpu {

enum class GemmPath { Auto, OpenBlas };

// Auto (the default; ATTNSWEEP_CPU_GEMM=openblas makes OpenBLAS the default instead):
// the AVX-512 kernels where the CPU has avx512f; OpenBlas: always the fallback (tests).
void set_gemm_path(GemmPath path);
GemmPath gemm_path();
// Whether the CPU supports the AVX-512 kernels at all (independent of the path chosen).
bool gemm_avx512_supported();
// Whether matmul_* with inner size K and output width N take the AVX-512 kernels now.
bool gemm_avx512_usable(int64_t K, int64_t N);

// A pass over finished output rows [r0, r0 + rows) of a forward / dinp GEMM, run by the
// thread that computed them while they are still in cache (GELU fused into the matmul).
struct RowEpilogue {
  void (*fn)(const void* ctx, float* out, int64_t r0, int64_t rows) = nullptr;
  const void* ctx = nullptr;
};

// Same contracts as kernels/ops.h matmul_forward / matmul_backward (backward adds), plus
// an optional epilogue over the output rows; with dinp_overwrite, dinp = dout @ weight
// instead of += (its old contents are not read).
void matmul_forward_avx512(float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,
                           int64_t OC, RowEpilogue epi = {});
void matmul_backward_avx512(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int64_t N, int64_t C, int64_t OC, RowEpilogue dinp_epi = {},
                            bool dinp_overwrite = false);

// The two halves of matmul_forward_avx512, for callers that run their own row blocks
// inside one OpenMP region (kernels/cpu/layer.cpp): the weight (OC, C) packed once
// (panels_floats(C, OC) floats, 64-byte aligned; an OpenMP loop, call it outside parallel
// regions), then any rows [r0, r0 + rows) of out computed on the calling thread, the
// epilogue run per group of rows as matmul_forward_avx512 does. The same values as
// matmul_forward_avx512, whatever the blocks. The backward's dinp rows (dout @ weight,
// OVERWRITTEN) are matmul_rows_avx512 with bias null, C and OC swapped and the weight
// packed by pack_weight_dinp (panels_floats(OC, C) floats): the same values as
// matmul_backward_avx512's dinp.
void pack_weight_forward(float* bp, const float* weight, int64_t C, int64_t OC);
void pack_weight_dinp(float* bp, const float* weight, int64_t C, int64_t OC);
void matmul_rows_avx512(float* out, const float* inp, const float* bp, const float* bias, int64_t r0, int64_t rows,
                        int64_t C, int64_t OC, RowEpilogue epi = {});
// The block's share of dweight and dbias: part (OC, C) = dout^T @ inp over rows
// [r0, r0 + rows), one float32 FMA chain per element in row order, and dbpart
// (dbias_partial_doubles(OC) doubles, may be null) = float64 column sums of dout over
// them, both OVERWRITTEN; the caller adds the blocks' parts in a fixed order.
int64_t dbias_partial_doubles(int64_t OC);
void dweight_rows_partial_avx512(float* part, double* dbpart, const float* dout, const float* inp, int64_t r0,
                                 int64_t rows, int64_t C, int64_t OC);

// Serial building blocks for callers with their own loops (kernels/cpu/attention.cpp's
// general path), on the calling thread:
// - pack_panels: B (K x N), element (k, j) at src[k sk + j sj] times scale, into
//   panels_floats(K, N) floats (64-byte aligned): 32-column panels of depth K, zero-padded;
// - gemm_rows_panels: C[r][0, N) (ldc) = (add_c: +=) A[r][0, K) (lda) @ B for r < rows,
//   B packed with depth ks >= K (its first K rows used);
// - gemm_at_b_add: DW (M x N, ld) += A^T B, A (rows x M, lda), B (rows x N, ldb), both read
//   in place; each element's sum over the rows is one FMA chain in row order, then added.
int64_t panels_floats(int64_t K, int64_t N);
void pack_panels(float* bp, const float* src, int64_t sk, int64_t sj, int64_t K, int64_t N, float scale);
void gemm_rows_panels(float* c, int64_t ldc, const float* a, int64_t lda, const float* bp, int64_t ks, int64_t K,
                      int64_t N, int64_t rows, bool add_c);
void gemm_at_b_add(float* dw, int64_t ld, const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows,
                   int64_t M, int64_t N);

}  // namespace attnsweep::cpu
