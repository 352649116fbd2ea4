// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011),
// exactly as Random123 defines it (philox4x32 in <Random123/philox.h>) and cuRAND's
// curand_Philox4x32_10: a counter-based generator, so any output is a pure function of
// (counter, key) and any part of a stream is made without making what comes before it.
//
// One definition for any lane count: U is uint32_t (one counter), u32x4 (4 counters, SSE2),
// u32x8 (8 counters, AVX2) or u32x16 (16, AVX-512F), where lane j of ctr[w] is word w of
// counter j. Everything
// is always_inline, so a vector form takes the instruction set of the function it ends up
// in: the u32x8 form belongs in a __attribute__((target("avx2"))) function (the caller
// checks the CPU at run time), the u32x4 form runs on any x86-64 (the vector forms use x86
// builtins: x86-64 only, like kernels/cpu).
#pragma once

#include <immintrin.h>  // also declares the AVX2 builtins used below

#include <array>
#include <cstdint>

// 32-byte vectors in functions compiled without AVX: GCC warns that returning them changes
// the ABI and notes it for parameters passed by value. These functions are always inlined,
// so no such call exists; the warning is silenced and vector parameters go by reference.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace attnsweep {

typedef uint32_t u32x4 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));

// Random123's PHILOX_M4x32_0/1 (the round multipliers) and PHILOX_W32_0/1 (the Weyl
// increments of the key between rounds).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

// The 32 x 32 -> 64-bit products m * x as low and high words. In vectors, the high words
// come from two unsigned multiplies into 64-bit products ((v)pmuludq), of the even lanes and
// of the odd lanes shifted down, and a blend. GCC 12 does not turn the same thing written
// with uint64 vector casts into pmuludq (it emits a full 64 x 64 multiply: three pmuludq,
// or a shift-and-add chain for the constant m), which made Philox 2.5x slower; hence the
// builtins. __builtin_ia32_pmuludq256 rather than the _mm256_mul_epu32 intrinsic: the
// intrinsic is a target("avx2") function, which GCC will not inline into this untargeted
// one, while a builtin is checked only in the function it finally ends up in. The low
// words: AVX2 has a 32-bit multiply (vpmulld), one instruction; SSE2 has none, so there
// they are blended out of the same two products.
[[gnu::always_inline]] inline void philox_mulhilo(uint32_t m, uint32_t x, uint32_t& lo, uint32_t& hi) {
  const uint64_t p = uint64_t{m} * x;
  lo = static_cast<uint32_t>(p);
  hi = static_cast<uint32_t>(p >> 32);
}
[[gnu::always_inline]] inline void philox_mulhilo(uint32_t m, const u32x4& x, u32x4& lo, u32x4& hi) {
  const __m128i mv = _mm_set1_epi32(static_cast<int>(m)), xv = reinterpret_cast<__m128i>(x);
  const auto even = reinterpret_cast<u32x4>(_mm_mul_epu32(xv, mv));                     // lanes 0, 2 as (lo, hi)
  const auto odd = reinterpret_cast<u32x4>(_mm_mul_epu32(_mm_srli_epi64(xv, 32), mv));  // lanes 1, 3
  lo = __builtin_shufflevector(even, odd, 0, 4, 2, 6);
  hi = __builtin_shufflevector(even, odd, 1, 5, 3, 7);
}
// (GCC only: clang, which builds the fuzz targets, takes the SSE2 path.)
#if !defined(__clang__)
[[gnu::always_inline]] inline void philox_mulhilo(uint32_t m, const u32x8& x, u32x8& lo, u32x8& hi) {
  typedef int i32x8 __attribute__((vector_size(32)));
  typedef uint64_t u64x4 __attribute__((vector_size(32)));
  const i32x8 mv = i32x8{} + static_cast<int>(m);
  const auto even = reinterpret_cast<u32x8>(__builtin_ia32_pmuludq256(reinterpret_cast<i32x8>(x), mv));
  const auto odd =
      reinterpret_cast<u32x8>(__builtin_ia32_pmuludq256(reinterpret_cast<i32x8>(reinterpret_cast<u64x4>(x) >> 32), mv));
  lo = x * m;
  hi = __builtin_shufflevector(even, odd, 1, 9, 3, 11, 5, 13, 7, 15);
}
// The 16-lane form (AVX-512F: a target("avx512f") function), the same scheme.
[[gnu::always_inline]] inline void philox_mulhilo(uint32_t m, const u32x16& x, u32x16& lo, u32x16& hi) {
  typedef int i32x16 __attribute__((vector_size(64)));
  typedef long long i64x8 __attribute__((vector_size(64)));
  typedef uint64_t u64x8 __attribute__((vector_size(64)));
  const i32x16 mv = i32x16{} + static_cast<int>(m);
  const auto x_odd = reinterpret_cast<i32x16>(reinterpret_cast<u64x8>(x) >> 32);
  const auto even = reinterpret_cast<u32x16>(
      __builtin_ia32_pmuludq512_mask(reinterpret_cast<i32x16>(x), mv, i64x8{}, static_cast<unsigned char>(0xff)));
  const auto odd =
      reinterpret_cast<u32x16>(__builtin_ia32_pmuludq512_mask(x_odd, mv, i64x8{}, static_cast<unsigned char>(0xff)));
  lo = x * m;
  hi = __builtin_shufflevector(even, odd, 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31);
}
#endif

// Philox4x32-10 of one counter (U = uint32_t) or of 4 / 8 counters at once, all under one key.
template <class U>
[[gnu::always_inline]] inline std::array<U, 4> philox4x32_10(const std::array<U, 4>& counter,
                                                             std::array<uint32_t, 2> key) {
  std::array<U, 4> ctr = counter;
  // Unrolled, the round keys are values the caller's loop computes once, outside it.
#pragma GCC unroll 10
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kPhiloxW0;
      key[1] += kPhiloxW1;
    }
    U lo0, hi0, lo1, hi1;
    philox_mulhilo(kPhiloxM0, ctr[0], lo0, hi0);
    philox_mulhilo(kPhiloxM1, ctr[2], lo1, hi1);
    ctr = {hi1 ^ ctr[1] ^ key[0], lo1, hi0 ^ ctr[3] ^ key[1], lo0};
  }
  return ctr;
}

}  // namespace attnsweep

#pragma GCC diagnostic pop
