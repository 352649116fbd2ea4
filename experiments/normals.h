// N(0, 1) float32 normals from Philox4x32-10 (experiments/philox.h) by Box-Muller, for
// paper B's in-context-regression prompts: output i is a pure function of (key, stream, i),
// the same bits on every machine and on every code path (AVX-512F, 16 counters at a time,
// AVX2, 8, and SSE2, 4), at several hundred million a second on one core.
//
// Output i comes from Philox block b = i / 4: counter (b lo, b hi, stream lo, stream hi),
// key (key lo, key hi). Its words w0..w3 make two Box-Muller pairs from their top 24 bits,
// u1 = ((w0 >> 8) + 1) 2^-24 in (0, 1] and u2 = (w1 >> 8) 2^-24 in [0, 1) (w2, w3 the
// second pair), and out[4b .. 4b+3] = r0 cos(2 pi u2), r0 sin(2 pi u2), r1 cos, r1 sin with
// r = sqrt(-2 ln u1). 24-bit uniforms bound |out| by sqrt(48 ln 2) = 5.77 (P(|z| > 5.77)
// = 8e-9 for a true normal).
#pragma once

#include <cstdint>

namespace attnsweep {

// out[0, n) = normals 0 .. n-1 of (key, stream); any n >= 0.
void philox_normals(uint64_t key, uint64_t stream, float* out, int64_t n);

// ---- for tests and benchmarks ---------------------------------------------------------
enum class NormalsPath { kSse2, kAvx2, kAvx512 };
// Whether this CPU runs the path (kAvx2 needs AVX2, kAvx512 AVX-512F); philox_normals
// takes the widest it can (normals_best_path).
bool normals_path_supported(NormalsPath path);
NormalsPath normals_best_path();
const char* normals_path_name(NormalsPath path);  // "sse2", "avx2", "avx512"
// philox_normals on the given path.
void philox_normals_path(NormalsPath path, uint64_t key, uint64_t stream, float* out, int64_t n);
// The float32 functions philox_normals is built from, element by element: out = ln(u)
// for u in [2^-24, 1], and sin / cos of 2 pi k 2^-24 for integers k in [0, 2^24).
void normals_log(const float* u, float* out, int64_t n);
void normals_sincos_2pi(const uint32_t* k, float* sin_out, float* cos_out, int64_t n);

}  // namespace attnsweep
