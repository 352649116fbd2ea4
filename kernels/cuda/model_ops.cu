// CUDA backend of kernels/model_ops.h (declared in kernels/model_ops_cuda.h): one thread
// per output element, grid-stride (launch.cuh). The index maps are those of
// kernels/cpu/model_ops.cpp with the loops flattened; reads of the row-major side are
// coalesced. The global norm lives in ops.cu, beside the MSE reduction it shares.
#include "kernels/cuda/launch.cuh"
#include "kernels/model_ops_cuda.h"

namespace attnsweep::cuda {
namespace {

// (b, t, c) of a row-major (B, T, C) index, and the (B, H, T, hd) index of the same
// element, c = h hd + j.
struct HeadIndex {
  int64_t T, H, hd;
  __device__ int64_t operator()(int64_t bt, int64_t c) const {
    const int64_t b = bt / T, t = bt % T, h = c / hd, j = c % hd;
    return ((b * H + h) * T + t) * hd + j;
  }
};

struct SplitHeads {  // i over (B, T, C)
  float* q;
  float* k;
  float* v;
  const float* qkv;
  HeadIndex at;
  int64_t C;
  __device__ void operator()(int64_t i) const {
    const int64_t bt = i / C, c = i % C, d = at(bt, c);
    const float* src = qkv + bt * 3 * C + c;
    q[d] = src[0];
    k[d] = src[C];
    v[d] = src[2 * C];
  }
};

struct MergeHeads {  // i over (B, T, C)
  float* dqkv;
  const float* dq;
  const float* dk;
  const float* dv;
  HeadIndex at;
  int64_t C;
  __device__ void operator()(int64_t i) const {
    const int64_t bt = i / C, c = i % C, s = at(bt, c);
    float* dst = dqkv + bt * 3 * C + c;
    dst[0] = dq[s];
    dst[C] = dk[s];
    dst[2 * C] = dv[s];
  }
};

struct HeadsToRows {  // i over (B, T, C)
  float* out;
  const float* in;
  HeadIndex at;
  int64_t C;
  __device__ void operator()(int64_t i) const { out[i] = in[at(i / C, i % C)]; }
};

struct RowsToHeads {
  float* out;
  const float* in;
  HeadIndex at;
  int64_t C;
  __device__ void operator()(int64_t i) const { out[at(i / C, i % C)] = in[i]; }
};

struct TokensForward {  // i over (B, T, C)
  float* encoded;
  const float* emb;
  const float* cls;
  const float* wpe;
  int64_t T, N, C, off;
  __device__ void operator()(int64_t i) const {
    const int64_t bt = i / C, c = i % C, b = bt / T, t = bt % T;
    const float src = t < off ? cls[c] : emb[(b * N + t - off) * C + c];
    encoded[i] = src + wpe[t * C + c];
  }
};

struct PositionsBackward {  // i over (T, C): one owner per dwpe (and dcls) element, batch in order
  float* dwpe;
  float* dcls;
  const float* d;
  int64_t B, T, C, off;
  __device__ void operator()(int64_t i) const {
    const int64_t t = i / C, c = i % C;
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += d[(b * T + t) * C + c];
    dwpe[i] = acc;
    if (t < off) {
      float a = dcls[c];
      for (int64_t b = 0; b < B; ++b) a += d[(b * T + t) * C + c];
      dcls[c] = a;
    }
  }
};

struct TokenRows {  // i over (B, N, C): demb = the token rows of dencoded
  float* demb;
  const float* d;
  int64_t T, N, C, off;
  __device__ void operator()(int64_t i) const {
    const int64_t NC = N * C, b = i / NC, r = i % NC;
    demb[i] = d[(b * T + off) * C + r];
  }
};

struct ClsPoolForward {  // i over (B, C)
  float* pooled;
  const float* inp;
  int64_t T, C;
  __device__ void operator()(int64_t i) const { pooled[i] = inp[(i / C) * T * C + i % C]; }
};

// Masked mean pool (model_ops.h): the CPU's loops, one thread per (b, c), t in order,
// the sum in float64 — the CPU's bits.
struct MaskedMeanpoolForward {  // i over (B, C)
  float* out;
  const float* inp;
  const float* mask;
  int64_t T, C;
  __device__ void operator()(int64_t i) const {
    const int64_t b = i / C, c = i % C;
    double acc = 0;
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (mask[b * T + t] == 0.0f) continue;
      ++n;
      acc += inp[(b * T + t) * C + c];
    }
    const double inv = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
    out[i] = static_cast<float>(acc * inv);
  }
};

struct MaskedMeanpoolBackward {  // i over (B, C)
  float* dinp;
  const float* dout;
  const float* mask;
  int64_t T, C;
  __device__ void operator()(int64_t i) const {
    const int64_t b = i / C, c = i % C;
    int64_t n = 0;
    for (int64_t t = 0; t < T; ++t) n += mask[b * T + t] != 0.0f;
    if (n == 0) return;
    const float g = dout[i] * (1.0f / static_cast<float>(n));
    for (int64_t t = 0; t < T; ++t)
      if (mask[b * T + t] != 0.0f) dinp[(b * T + t) * C + c] += g;
  }
};

struct GatherRows {  // i over (H, n, hd)
  float* dst;
  const float* src;
  const int32_t* rows;
  int64_t n, T, hd;
  __device__ void operator()(int64_t i) const {
    const int64_t j = i % hd, r = (i / hd) % n, h = i / (hd * n);
    dst[i] = src[(h * T + rows[r]) * hd + j];
  }
};

struct ClsPoolBackward {
  float* dinp;
  const float* dpooled;
  int64_t T, C;
  __device__ void operator()(int64_t i) const { dinp[(i / C) * T * C + i % C] += dpooled[i]; }
};

// Read-out: the query is token N-1 (its q is (B, H, 1, hd), i.e. (B, C) row-major), the
// keys and values tokens 0 .. N-2 (Lp = N - 1 of them).
struct ReadoutQuery {  // i over (B, C)
  float* q;            // forward: q[i] = qkv[query row]; backward: dqkv[query row] = dq[i]
  float* qkv;
  int64_t N, C;
  bool backward;
  __device__ void operator()(int64_t i) const {
    const int64_t b = i / C, c = i % C, r = (b * N + N - 1) * 3 * C + c;
    if (backward)
      qkv[r] = q[i];
    else
      q[i] = qkv[r];
  }
};

struct ReadoutKeys {  // i over (B, Lp, C)
  float* k;
  float* v;
  float* qkv;
  int64_t N, H, hd;
  bool backward;
  __device__ void operator()(int64_t i) const {
    const int64_t C = H * hd, Lp = N - 1;
    const int64_t b = i / (Lp * C), r = i % (Lp * C), n = r / C, c = r % C, h = c / hd, j = c % hd;
    const int64_t d = ((b * H + h) * Lp + n) * hd + j;
    float* row = qkv + (b * N + n) * 3 * C + c;
    if (backward) {
      row[C] = k[d];
      row[2 * C] = v[d];
    } else {
      k[d] = row[C];
      v[d] = row[2 * C];
    }
  }
};

struct ReadoutPick {  // i over B
  float* pred;
  float* o;
  int64_t H, hd;
  bool backward;
  __device__ void operator()(int64_t b) const {
    const int64_t at = ((b * H + H - 1) + 1) * hd - 1;
    if (backward)
      o[at] = pred[b];
    else
      pred[b] = o[at];
  }
};

struct Scale {
  float* g;
  float c;
  __device__ void operator()(int64_t i) const { g[i] *= c; }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

void split_heads_cuda(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t hd,
                      cudaStream_t stream) {
  launch_map(SplitHeads{q, k, v, qkv, HeadIndex{T, H, hd}, H * hd}, B * T * H * hd, stream);
}

void merge_heads_cuda(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t H,
                      int64_t hd, cudaStream_t stream) {
  launch_map(MergeHeads{dqkv, dq, dk, dv, HeadIndex{T, H, hd}, H * hd}, B * T * H * hd, stream);
}

void heads_to_rows_cuda(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t stream) {
  launch_map(HeadsToRows{out, in, HeadIndex{T, H, hd}, H * hd}, B * T * H * hd, stream);
}

void rows_to_heads_cuda(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd, cudaStream_t stream) {
  launch_map(RowsToHeads{out, in, HeadIndex{T, H, hd}, H * hd}, B * T * H * hd, stream);
}

void tokens_forward_cuda(float* encoded, const float* emb, const float* cls, const float* wpe, int64_t B, int64_t T,
                         int64_t N, int64_t C, int64_t off, cudaStream_t stream) {
  launch_map(TokensForward{encoded, emb, cls, wpe, T, N, C, off}, B * T * C, stream);
}

void tokens_backward_cuda(float* dwpe, float* dcls, float* demb, const float* dencoded, int64_t B, int64_t T, int64_t N,
                          int64_t C, int64_t off, cudaStream_t stream) {
  launch_map(PositionsBackward{dwpe, dcls, dencoded, B, T, C, off}, T * C, stream);
  launch_map(TokenRows{demb, dencoded, T, N, C, off}, B * N * C, stream);
}

void cls_pool_forward_cuda(float* pooled, const float* inp, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  launch_map(ClsPoolForward{pooled, inp, T, C}, B * C, stream);
}

void cls_pool_backward_cuda(float* dinp, const float* dpooled, int64_t B, int64_t T, int64_t C, cudaStream_t stream) {
  launch_map(ClsPoolBackward{dinp, dpooled, T, C}, B * C, stream);
}

void masked_meanpool_forward_cuda(float* out, const float* inp, const float* mask, int64_t B, int64_t T, int64_t C,
                                  cudaStream_t stream) {
  launch_map(MaskedMeanpoolForward{out, inp, mask, T, C}, B * C, stream);
}

void masked_meanpool_backward_cuda(float* dinp, const float* dout, const float* mask, int64_t B, int64_t T, int64_t C,
                                   cudaStream_t stream) {
  launch_map(MaskedMeanpoolBackward{dinp, dout, mask, T, C}, B * C, stream);
}

void gather_head_rows_cuda(float* dst, const float* src, const int32_t* rows, int64_t n, int64_t H, int64_t T,
                           int64_t hd, cudaStream_t stream) {
  launch_map(GatherRows{dst, src, rows, n, T, hd}, H * n * hd, stream);
}

// One functor per gather and its scatter (the `backward` flag picks the direction), so
// the source side is passed without const; it is only read in that direction.
void readout_split_cuda(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t N, int64_t H, int64_t hd,
                        cudaStream_t stream) {
  float* src = const_cast<float*>(qkv);
  launch_map(ReadoutQuery{q, src, N, H * hd, false}, B * H * hd, stream);
  launch_map(ReadoutKeys{k, v, src, N, H, hd, false}, B * (N - 1) * H * hd, stream);
}

void readout_merge_cuda(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t N, int64_t H,
                        int64_t hd, cudaStream_t stream) {
  launch_map(ReadoutQuery{const_cast<float*>(dq), dqkv, N, H * hd, true}, B * H * hd, stream);
  launch_map(ReadoutKeys{const_cast<float*>(dk), const_cast<float*>(dv), dqkv, N, H, hd, true}, B * (N - 1) * H * hd,
             stream);
}

void readout_pick_cuda(float* pred, const float* o, int64_t B, int64_t H, int64_t hd, cudaStream_t stream) {
  launch_map(ReadoutPick{pred, const_cast<float*>(o), H, hd, false}, B, stream);
}

void readout_pick_backward_cuda(float* dout, const float* dpred, int64_t B, int64_t H, int64_t hd,
                                cudaStream_t stream) {
  launch_map(ReadoutPick{const_cast<float*>(dpred), dout, H, hd, true}, B, stream);
}

void scale_inplace_cuda(float* g, int64_t n, float c, cudaStream_t stream) {
  launch_map(Scale{g, c}, n, stream);
}

}  // namespace attnsweep
