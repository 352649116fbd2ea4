// Hand-written AVX-512 GEMMs for the trainer's matmuls (kernels/ops.h matmul_forward /
// matmul_backward), llm.c / BLIS style: a 8 x 32 register micro-kernel (16 zmm
// accumulators), the small weight packed once per call, the big activations read in
// place. Every output element is one float32 FMA chain in a fixed k order computed by
// one thread, so results do not depend on the thread count nor on the tiling.
// Internal to kernels/cpu: ops.cpp dispatches here when gemm_avx512_usable() says so and
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
void matmul_forward_avx512(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                           int64_t C, int64_t OC, RowEpilogue epi = {});
void matmul_backward_avx512(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                            const float* weight, int64_t N, int64_t C, int64_t OC, RowEpilogue dinp_epi = {},
                            bool dinp_overwrite = false);

}  // namespace attnsweep::cpu
