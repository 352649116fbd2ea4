#include "experiments/normals.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "experiments/philox.h"

// The same bits on every path and machine: the math (experiments/normals_math.h) uses only
// +, -, * and sqrt, each rounded once (IEEE round to nearest), and bit operations, in the
// same order on every path. What could break that is the compiler fusing a * b + c into one
// FMA, which rounds once instead of twice: GCC does so by default in GNU mode (-std=gnu++20,
// as the project builds) wherever FMA exists (-march=native, or another architecture's
// baseline). Hence fp-contract=off for every function below (and for the file, in
// experiments/CMakeLists.txt). The AVX2 and AVX-512 paths target "avx2" and "avx512f",
// which do not imply "fma" in GCC, for the same reason; normals_math.h refuses fast-math
// and x87 excess precision.
#pragma GCC optimize("fp-contract=off")
// Speed only (instruction order, not results): a block of normals is a chain of ~130
// cycles (10 Philox rounds, then ln, sqrt) over ~450 instructions, longer than the CPU's
// out-of-order window sees, so normals_chunk hands over several independent groups at
// once, and GCC's scheduler before register allocation (off by default on x86) interleaves
// them: 1.3x on the AVX2 path and 1.5x on SSE2 here.
#pragma GCC optimize("schedule-insns", "sched-pressure")

// Vector parameters go by reference, see philox.h. And every function that takes or returns
// a vector is always_inline, none from the library (std::bit_cast: reinterpret_cast, which
// GCC defines between vectors of one size): an out-of-line one compiled without AVX, called
// from the AVX2 path, would pass 32-byte vectors by another convention (a crash at -O0).
#pragma GCC diagnostic ignored "-Wpsabi"

// After the pragmas above, so that the math takes them too.
#include "experiments/normals_math.h"

namespace attnsweep {
namespace {

typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef float f32x4 __attribute__((vector_size(16)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef float f32x16 __attribute__((vector_size(64)));

// Correctly rounded square roots (the builtin for the reason given in philox.h).
[[gnu::always_inline]] inline f32x4 vsqrt(const f32x4& x) {
  return _mm_sqrt_ps(x);
}
#if !defined(__clang__)
[[gnu::always_inline]] inline f32x8 vsqrt(const f32x8& x) {
  return __builtin_ia32_sqrtps256(x);
}
[[gnu::always_inline]] inline f32x16 vsqrt(const f32x16& x) {
  return __builtin_ia32_sqrtps512_mask(x, x, static_cast<unsigned short>(0xffff), 4 /* _MM_FROUND_CUR_DIRECTION */);
}
#endif

// One path's vector types: W Philox counters (blocks) per vector.
// kGroups: independent groups of W blocks handed over at once (see the scheduling note).
template <class U_, class I_, class F_, int Groups>
struct Lanes {
  using U = U_;
  using I = I_;
  using F = F_;
  static constexpr int kW = sizeof(U) / sizeof(uint32_t);
  static constexpr int kGroups = Groups;
  // normals_math.h's conversions (the builtins for the reason given in philox.h).
  [[gnu::always_inline]] static F from_bits(const U& u) { return reinterpret_cast<F>(u); }
  [[gnu::always_inline]] static U to_bits(const F& f) { return reinterpret_cast<U>(f); }
  [[gnu::always_inline]] static F from_int(const U& u) { return __builtin_convertvector(reinterpret_cast<I>(u), F); }
  [[gnu::always_inline]] static F sqrt(const F& x) { return vsqrt(x); }
};
using Sse2 = Lanes<u32x4, i32x4, f32x4, 4>;
using Avx2 = Lanes<u32x8, i32x8, f32x8, 4>;
using Avx512 = Lanes<u32x16, i32x16, f32x16, 4>;  // 2, 6, 8 groups: 7-18 % slower (Zen 4)

// Output order out[4 b + j] from vectors holding j = 0..3 (r0 cos, r0 sin, r1 cos, r1 sin)
// of W blocks: a 4 x 4 transpose in each 128-bit half (two rounds of unpacks).
[[gnu::always_inline]] inline void store_blocks(const std::array<f32x4, 4>& v, float* out) {
  const f32x4 p0 = __builtin_shufflevector(v[0], v[1], 0, 4, 1, 5),
              p1 = __builtin_shufflevector(v[0], v[1], 2, 6, 3, 7);
  const f32x4 q0 = __builtin_shufflevector(v[2], v[3], 0, 4, 1, 5),
              q1 = __builtin_shufflevector(v[2], v[3], 2, 6, 3, 7);
  const std::array<f32x4, 4> o = {
      __builtin_shufflevector(p0, q0, 0, 1, 4, 5), __builtin_shufflevector(p0, q0, 2, 3, 6, 7),
      __builtin_shufflevector(p1, q1, 0, 1, 4, 5), __builtin_shufflevector(p1, q1, 2, 3, 6, 7)};
  std::memcpy(out, o.data(), sizeof o);
}
[[gnu::always_inline]] inline void store_blocks(const std::array<f32x8, 4>& v, float* out) {
  const f32x8 p0 = __builtin_shufflevector(v[0], v[1], 0, 8, 1, 9, 4, 12, 5, 13);
  const f32x8 p1 = __builtin_shufflevector(v[0], v[1], 2, 10, 3, 11, 6, 14, 7, 15);
  const f32x8 q0 = __builtin_shufflevector(v[2], v[3], 0, 8, 1, 9, 4, 12, 5, 13);
  const f32x8 q1 = __builtin_shufflevector(v[2], v[3], 2, 10, 3, 11, 6, 14, 7, 15);
  const std::array<f32x8, 4> o = {__builtin_shufflevector(p0, q0, 0, 1, 8, 9, 4, 5, 12, 13),
                                  __builtin_shufflevector(p0, q0, 2, 3, 10, 11, 6, 7, 14, 15),
                                  __builtin_shufflevector(p1, q1, 0, 1, 8, 9, 4, 5, 12, 13),
                                  __builtin_shufflevector(p1, q1, 2, 3, 10, 11, 6, 7, 14, 15)};
  std::memcpy(out, o.data(), sizeof o);
}

// (16 lanes: the same 4 x 4 transposes, in each 128-bit quarter.)
[[gnu::always_inline]] inline void store_blocks(const std::array<f32x16, 4>& v, float* out) {
  const f32x16 p0 = __builtin_shufflevector(v[0], v[1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
  const f32x16 p1 = __builtin_shufflevector(v[0], v[1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  const f32x16 q0 = __builtin_shufflevector(v[2], v[3], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
  const f32x16 q1 = __builtin_shufflevector(v[2], v[3], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  const std::array<f32x16, 4> o = {
      __builtin_shufflevector(p0, q0, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
      __builtin_shufflevector(p0, q0, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31),
      __builtin_shufflevector(p1, q1, 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
      __builtin_shufflevector(p1, q1, 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31)};
  std::memcpy(out, o.data(), sizeof o);
}

// The 4 W normals of W blocks from their Philox words into out: Box-Muller on the pairs
// (w0, w1) and (w2, w3).
template <class L>
[[gnu::always_inline]] inline void box_muller(const std::array<typename L::U, 4>& w, float* out) {
  std::array<typename L::F, 4> v;
  box_muller_pair<L>(w[0], w[1], v[0], v[1]);
  box_muller_pair<L>(w[2], w[3], v[2], v[3]);
  store_blocks(v, out);
}

// The normals of blocks b0 .. b0 + L::kGroups W - 1 (b0 a multiple of W) into out, all the
// Philox first, then all the math (see the scheduling note above). Lane l of group g holds
// block b0 + g W + (l mod 4) W/4 + l / 4, for W = 8 the blocks 0 2 4 6 | 1 3 5 7: so that
// the transpose of store_blocks, which stays within 128-bit halves, leaves them in order.
template <class L>
[[gnu::always_inline]] inline void normals_chunk(std::array<uint32_t, 2> key, uint64_t stream, uint64_t b0,
                                                 float* out) {
  using U = typename L::U;
  U lane;
  for (int l = 0; l < L::kW; ++l) lane[l] = static_cast<uint32_t>(l % 4 * (L::kW / 4) + l / 4);
  std::array<std::array<U, 4>, L::kGroups> words;
#pragma GCC unroll 4
  for (int g = 0; g < L::kGroups; ++g) {
    const uint64_t b = b0 + static_cast<uint64_t>(g * L::kW);  // its low word plus the lane does not carry
    words[g] =
        philox4x32_10(std::array<U, 4>{static_cast<uint32_t>(b) + lane, U{} + static_cast<uint32_t>(b >> 32),
                                       U{} + static_cast<uint32_t>(stream), U{} + static_cast<uint32_t>(stream >> 32)},
                      key);
  }
#pragma GCC unroll 4
  for (int g = 0; g < L::kGroups; ++g) box_muller<L>(words[g], out + 4 * L::kW * g);
}

template <class L>
[[gnu::always_inline]] inline void fill(uint64_t key, uint64_t stream, float* out, int64_t n) {
  constexpr int64_t kChunk = 4 * L::kW * L::kGroups;  // outputs per chunk
  const std::array<uint32_t, 2> k = {static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32)};
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) normals_chunk<L>(k, stream, static_cast<uint64_t>(i / 4), out + i);
  if (i < n) {  // the tail: a whole chunk, of which the first n - i go out
    float tail[kChunk];
    normals_chunk<L>(k, stream, static_cast<uint64_t>(i / 4), tail);
    std::memcpy(out + i, tail, static_cast<size_t>(n - i) * sizeof(float));
  }
}

void fill_sse2(uint64_t key, uint64_t stream, float* out, int64_t n) {
  fill<Sse2>(key, stream, out, n);
}
#if defined(__clang__)
// The AVX2 and AVX-512 builtins are GCC's: under clang (the fuzz build) the SSE2 path, the
// same bits.
constexpr bool kHaveWidePaths = false;
void fill_avx2(uint64_t key, uint64_t stream, float* out, int64_t n) {
  fill<Sse2>(key, stream, out, n);
}
void fill_avx512(uint64_t key, uint64_t stream, float* out, int64_t n) {
  fill<Sse2>(key, stream, out, n);
}
#else
constexpr bool kHaveWidePaths = true;
__attribute__((target("avx2"))) void fill_avx2(uint64_t key, uint64_t stream, float* out, int64_t n) {
  fill<Avx2>(key, stream, out, n);
}
__attribute__((target("avx512f"))) void fill_avx512(uint64_t key, uint64_t stream, float* out, int64_t n) {
  fill<Avx512>(key, stream, out, n);
}
#endif

using FillFn = void (*)(uint64_t, uint64_t, float*, int64_t);
FillFn fill_of(NormalsPath path) {
  switch (path) {
    case NormalsPath::kSse2: return fill_sse2;
    case NormalsPath::kAvx2: return fill_avx2;
    case NormalsPath::kAvx512: return fill_avx512;
  }
  return fill_sse2;
}

}  // namespace

const char* normals_path_name(NormalsPath path) {
  switch (path) {
    case NormalsPath::kSse2: return "sse2";
    case NormalsPath::kAvx2: return "avx2";
    case NormalsPath::kAvx512: return "avx512";
  }
  return "?";
}

bool normals_path_supported(NormalsPath path) {
  switch (path) {
    case NormalsPath::kSse2: return true;
    case NormalsPath::kAvx2: return kHaveWidePaths && __builtin_cpu_supports("avx2");
    case NormalsPath::kAvx512: return kHaveWidePaths && __builtin_cpu_supports("avx512f");
  }
  return false;
}

NormalsPath normals_best_path() {
  for (NormalsPath path : {NormalsPath::kAvx512, NormalsPath::kAvx2})
    if (normals_path_supported(path)) return path;
  return NormalsPath::kSse2;
}

void philox_normals_path(NormalsPath path, uint64_t key, uint64_t stream, float* out, int64_t n) {
  if (!normals_path_supported(path))
    throw std::runtime_error(std::string("philox_normals: this CPU has no ") + normals_path_name(path));
  fill_of(path)(key, stream, out, n);
}

void philox_normals(uint64_t key, uint64_t stream, float* out, int64_t n) {
  static const FillFn fill_best = fill_of(normals_best_path());
  fill_best(key, stream, out, n);
}

void normals_log(const float* u, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) {
    const size_t bytes = static_cast<size_t>(std::min<int64_t>(4, n - i)) * sizeof(float);
    f32x4 x = f32x4{} + 1.0f;
    std::memcpy(&x, u + i, bytes);
    const f32x4 y = log_unit<Sse2>(x);
    std::memcpy(out + i, &y, bytes);
  }
}

void normals_sincos_2pi(const uint32_t* k, float* sin_out, float* cos_out, int64_t n) {
  for (int64_t i = 0; i < n; i += 4) {
    const size_t bytes = static_cast<size_t>(std::min<int64_t>(4, n - i)) * sizeof(float);
    u32x4 x{};
    std::memcpy(&x, k + i, bytes);
    f32x4 s, c;
    sincos_2pi<Sse2>(x, s, c);
    std::memcpy(sin_out + i, &s, bytes);
    std::memcpy(cos_out + i, &c, bytes);
  }
}

}  // namespace attnsweep
