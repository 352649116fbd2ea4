// The emulated twins of kernels/cuda/ptx.cuh's inline PTX: the same functions, computed
// by the emulated warp from the PTX ISA's lane maps (block.cpp).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <source_location>
#include <type_traits>

#include "emulator/emu.h"

namespace attnsweep::emu::ptx {

using Loc = std::source_location;

// cp.async.cg.shared.global [dst], [src], 16, src_bytes
inline void cp_async16(void* dst, const void* src, int src_bytes, Loc loc = Loc::current()) {
  emu::cp_async16(dst, src, src_bytes, loc);
}
inline void cp_async_commit() {
  emu::cp_async_commit();
}
template <int N>
inline void cp_async_wait(Loc loc = Loc::current()) {
  emu::cp_async_wait(N, loc);
}

// ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16
inline void ldmatrix_x4(uint32_t (&r)[4], const void* p, Loc loc = Loc::current()) {
  warp_collective(WarpOp::ldmatrix_x4, 0xffffffffu, 0, &p, r, loc);
}
inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p, Loc loc = Loc::current()) {
  warp_collective(WarpOp::ldmatrix_x4_trans, 0xffffffffu, 0, &p, r, loc);
}

// The operands of one lane of mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.
struct MmaOperands {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
};

// c (16x8 f32) += a (16x16 row) * b (16x8 col)
template <class T>
inline void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, Loc loc = Loc::current()) {
  const MmaOperands in{{a[0], a[1], a[2], a[3]}, {b0, b1}, {c[0], c[1], c[2], c[3]}};
  warp_collective(std::is_same_v<T, __nv_bfloat16> ? WarpOp::mma_bf16 : WarpOp::mma_f16, 0xffffffffu, 0, &in, c, loc);
}

// ex2.approx.ftz.f32
inline float ex2(float x) {
  return ex2_approx_ftz(x);
}

}  // namespace attnsweep::emu::ptx
