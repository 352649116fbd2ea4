// Row kernels of the op families (kernels/cpu/layernorm.cpp, elementwise.cpp) that kernels/cpu/layer.cpp (the fused
// transformer layer) runs on its own blocks of rows. Internal to kernels/cpu. The *_rows epilogues have
// cpu::RowEpilogue's signature (kernels/cpu/gemm.h): they finish output rows [r0, r0 + rows) of a GEMM while those are
// in cache.
#pragma once

#include <cstdint>

namespace attnsweep::cpu::rows {

constexpr int64_t kRowBlock = 64;  // rows per parallel work item (LayerNorm, GELU)

// LayerNorm over the last axis of `rows` rows (kernels/ops.h layernorm_forward): out,
// and the rows' mean and rstd saved for the backward.
void layernorm_forward_rows(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int64_t rows, int64_t C);
// Its backward: dinp += d/d inp; sw[c] = sum_i dout * xhat, sb[c] = sum_i dout over these
// rows in order (float32, overwritten).
void layernorm_backward_rows(float* dinp, float* sw, float* sb, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int64_t rows, int64_t C);

// out (rows from out_row0 on: a whole buffer 0, a block's scratch its first row) =
// gelu(pre), pre indexed from row 0.
struct GeluForwardRows {
  const float* pre;
  float* out;
  int64_t OC;
  int64_t out_row0 = 0;
};
void gelu_forward_rows(const void* ctx, float* unused, int64_t r0, int64_t rows);

// dpre (the GEMM's output) = gelu'(pre) * dpre; with out, also out = gelu(pre) (rows from
// out_row0 on), from the same exp.
struct GeluBackwardRows {
  const float* pre;
  int64_t C;
  float* out = nullptr;
  int64_t out_row0 = 0;
};
void gelu_backward_rows(const void* ctx, float* dpre, int64_t r0, int64_t rows);

// out += resid, both indexed from row 0.
struct ResidualRows {
  const float* resid;
  int64_t OC;
};
void residual_rows(const void* ctx, float* out, int64_t r0, int64_t rows);

}  // namespace attnsweep::cpu::rows
