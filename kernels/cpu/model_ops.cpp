// CPU implementations of kernels/model_ops.h. Row-parallel loops (OpenMP, static
// schedules); the sums over the batch run in batch order inside one thread.
#include "kernels/model_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace attnsweep {

namespace {

// Copies of one head's row (hd = 16 floats here) are inline loops, not a memcpy call per
// 64 bytes (the calls were 4 % of a training step). GCC turns such loops back into memcpy
// calls unless the function that holds them is compiled without that pattern matching,
// and a function with its own optimize attribute is not inlined: so the attribute goes on
// each caller, and copy_row is a plain inline function.
#define ATTNSWEEP_INLINE_COPIES __attribute__((optimize("no-tree-loop-distribute-patterns")))

inline void copy_row(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = src[j];
}

}  // namespace

ATTNSWEEP_INLINE_COPIES void split_heads(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T,
                                         int64_t H, int64_t hd) {
  const int64_t C = H * hd;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    const float* src = qkv + bt * 3 * C;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t dst = ((b * H + h) * T + t) * hd;
      copy_row(q + dst, src + h * hd, hd);
      copy_row(k + dst, src + C + h * hd, hd);
      copy_row(v + dst, src + 2 * C + h * hd, hd);
    }
  }
}

ATTNSWEEP_INLINE_COPIES void merge_heads(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B,
                                         int64_t T, int64_t H, int64_t hd) {
  const int64_t C = H * hd;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    float* dst = dqkv + bt * 3 * C;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t src = ((b * H + h) * T + t) * hd;
      copy_row(dst + h * hd, dq + src, hd);
      copy_row(dst + C + h * hd, dk + src, hd);
      copy_row(dst + 2 * C + h * hd, dv + src, hd);
    }
  }
}

ATTNSWEEP_INLINE_COPIES void heads_to_rows(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h) copy_row(out + bt * H * hd + h * hd, in + ((b * H + h) * T + t) * hd, hd);
  }
}

ATTNSWEEP_INLINE_COPIES void rows_to_heads(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h) copy_row(out + ((b * H + h) * T + t) * hd, in + bt * H * hd + h * hd, hd);
  }
}

void tokens_forward(float* encoded, const float* emb, const float* cls, const float* wpe, int64_t B, int64_t T,
                    int64_t N, int64_t C, int64_t off) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    const float* src = t < off ? cls : emb + (b * N + t - off) * C;
    const float* pos = wpe + t * C;
    float* dst = encoded + bt * C;
    for (int64_t c = 0; c < C; ++c) dst[c] = src[c] + pos[c];
  }
}

void tokens_backward(float* dwpe, float* dcls, float* demb, const float* dencoded, int64_t B, int64_t T, int64_t N,
                     int64_t C, int64_t off) {
  // Positions and CLS sum over the batch in batch order (one thread per position).
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* d = dencoded + (b * T + t) * C;
      float* gp = dwpe + t * C;
      for (int64_t c = 0; c < C; ++c) gp[c] += d[c];
      if (t < off)
        for (int64_t c = 0; c < C; ++c) dcls[c] += d[c];
    }
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(demb + b * N * C, dencoded + (b * T + off) * C, static_cast<size_t>(N * C) * sizeof(float));
}

void cls_pool_forward(float* pooled, const float* inp, int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b) std::memcpy(pooled + b * C, inp + b * T * C, static_cast<size_t>(C) * sizeof(float));
}

void cls_pool_backward(float* dinp, const float* dpooled, int64_t B, int64_t T, int64_t C) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < C; ++c) dinp[b * T * C + c] += dpooled[b * C + c];
}

void pad_key_mask(float* mask, const int32_t* ids, int32_t pad_id, int64_t B, int64_t T, int64_t N, int64_t off) {
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) mask[b * T + t] = t < off || ids[b * N + t - off] != pad_id ? 1.0f : 0.0f;
}

void masked_meanpool_forward(float* out, const float* inp, const float* mask, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    std::vector<double> acc(static_cast<size_t>(C), 0.0);
    for (int64_t t = 0; t < T; ++t) {
      if (mask[b * T + t] == 0.0f) continue;
      ++n;
      const float* x = inp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) acc[static_cast<size_t>(c)] += x[c];
    }
    const double inv = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
    for (int64_t c = 0; c < C; ++c) out[b * C + c] = static_cast<float>(acc[static_cast<size_t>(c)] * inv);
  }
}

void masked_meanpool_backward(float* dinp, const float* dout, const float* mask, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) n += mask[b * T + t] != 0.0f;
    if (n == 0) continue;
    const float inv = 1.0f / static_cast<float>(n);
    for (int64_t t = 0; t < T; ++t) {
      if (mask[b * T + t] == 0.0f) continue;
      float* d = dinp + (b * T + t) * C;
      for (int64_t c = 0; c < C; ++c) d[c] += dout[b * C + c] * inv;
    }
  }
}

ATTNSWEEP_INLINE_COPIES void readout_split(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t N,
                                           int64_t H, int64_t hd) {
  const int64_t C = H * hd, Lp = N - 1;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      copy_row(q + (b * H + h) * hd, qkv + ((b * N + N - 1) * 3 * C) + h * hd, hd);
      for (int64_t n = 0; n < Lp; ++n) {
        const float* src = qkv + (b * N + n) * 3 * C;
        copy_row(k + ((b * H + h) * Lp + n) * hd, src + C + h * hd, hd);
        copy_row(v + ((b * H + h) * Lp + n) * hd, src + 2 * C + h * hd, hd);
      }
    }
}

ATTNSWEEP_INLINE_COPIES void readout_merge(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B,
                                           int64_t N, int64_t H, int64_t hd) {
  const int64_t C = H * hd, Lp = N - 1;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      copy_row(dqkv + (b * N + N - 1) * 3 * C + h * hd, dq + (b * H + h) * hd, hd);
      for (int64_t n = 0; n < Lp; ++n) {
        float* dst = dqkv + (b * N + n) * 3 * C;
        copy_row(dst + C + h * hd, dk + ((b * H + h) * Lp + n) * hd, hd);
        copy_row(dst + 2 * C + h * hd, dv + ((b * H + h) * Lp + n) * hd, hd);
      }
    }
}

void readout_pick(float* pred, const float* o, int64_t B, int64_t H, int64_t hd) {
  for (int64_t b = 0; b < B; ++b) pred[b] = o[((b * H + H - 1) + 1) * hd - 1];
}

void readout_pick_backward(float* dout, const float* dpred, int64_t B, int64_t H, int64_t hd) {
  for (int64_t b = 0; b < B; ++b) dout[((b * H + H - 1) + 1) * hd - 1] = dpred[b];
}

void scale_inplace(float* g, int64_t n, float c) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] *= c;
}

double global_norm(const float* g, int64_t n) {
  constexpr int64_t kBlock = 1 << 14;
  const int64_t nb = (n + kBlock - 1) / kBlock;
  std::vector<double> part(static_cast<size_t>(nb));
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < nb; ++b) {
    double s = 0;
    const int64_t e = std::min(n, (b + 1) * kBlock);
    for (int64_t i = b * kBlock; i < e; ++i) s += static_cast<double>(g[i]) * g[i];
    part[static_cast<size_t>(b)] = s;
  }
  double s = 0;
  for (double p : part) s += p;
  return std::sqrt(s);
}

}  // namespace attnsweep
