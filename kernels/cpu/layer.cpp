// The fused transformer layer of kernels/ops.h (layer_forward_fused_cpu,
// layer_backward_fused_cpu): one layer's ops run per block of ~256 rows that stays in L2,
// built from the row kernels of the op families (kernels/cpu/layernorm.cpp and
// elementwise.cpp, through kernels/cpu/rows.h), the serial GEMM pieces of
// kernels/cpu/gemm.cpp and the packed attention of kernels/cpu/attention.cpp. Its own
// file so that the op family files stay free of the attention (tests/fuzz builds them
// alone, with a clang that cannot build attention.cpp's multiversioned templates).
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <tuple>
#include <utility>
#include <vector>

#include "base/options.h"
#include "kernels/attention.h"
#include "kernels/cpu/aligned_scratch.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/rows.h"
#include "kernels/ops.h"

namespace attnsweep {

using namespace cpu::rows;

// ---- one transformer layer's forward and backward, fused over blocks of samples ---------

namespace {
// ATTNSWEEP_CPU_LAYER_FUSION=0 in the environment: off from the start (A/B timing).
std::atomic<bool> g_layer_fusion{options::cpu_layer_fusion()};
}  // namespace

void set_layer_fusion_cpu(bool on) {
  g_layer_fusion.store(on);
}

namespace {
// Samples per block of the fused layer: ~256 rows, whose activations (~(10 C + 2 F)
// floats a row: 1 MiB at C = 64, F = 256) stay in a core's L2 from one op to the next.
// A function of T only: the backward's sums do not depend on the thread count.
int64_t layer_block_samples(int64_t T) {
  return std::max<int64_t>(1, 256 / std::max<int64_t>(T, 1));
}

// Block blk of `per` samples: samples [b0, b1), rows [r0, r0 + rows).
struct SampleBlock {
  int64_t b0, b1, r0, rows;
  SampleBlock(int64_t blk, int64_t per, int64_t B, int64_t T)
      : b0(blk * per), b1(std::min(B, b0 + per)), r0(b0 * T), rows((b1 - b0) * T) {}
};

// For each (dst, offset, n) of `sums`: dst[i] += sum over blocks b, in order, in float64,
// of parts[b * stride + offset + i], i < n. Chunks of 512 elements in parallel, each read
// block by block (contiguous lines, not one float per line of every block).
struct BlockSum {
  float* dst;
  int64_t offset, n;
};
void add_block_sums(std::initializer_list<BlockSum> sums, const float* parts, int64_t stride, int64_t nblocks) {
  constexpr int64_t kChunk = 512;
  // The calling thread's list (no allocation once warm), read by the team through a
  // plain pointer: a thread_local named inside the region would be each thread's own.
  thread_local std::vector<std::pair<const BlockSum*, int64_t>> chunk_list;
  chunk_list.clear();
  for (const BlockSum& s : sums)
    for (int64_t i0 = 0; i0 < s.n; i0 += kChunk) chunk_list.emplace_back(&s, i0);
  const std::pair<const BlockSum*, int64_t>* chunks = chunk_list.data();
  const int64_t nchunks = static_cast<int64_t>(chunk_list.size());
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < nchunks; ++k) {
    const BlockSum& s = *chunks[k].first;
    const int64_t i0 = chunks[k].second, n = std::min(kChunk, s.n - i0);
    double acc[kChunk];
    for (int64_t i = 0; i < n; ++i) acc[i] = 0.0;
    for (int64_t b = 0; b < nblocks; ++b) {
      const float* p = parts + b * stride + s.offset + i0;
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) acc[i] += p[i];
    }
    for (int64_t i = 0; i < n; ++i) s.dst[i0 + i] += static_cast<float>(acc[i]);
  }
}
void add_block_sums(float* dst, const double* parts, int64_t stride, int64_t nblocks, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    double acc = 0.0;
    for (int64_t b = 0; b < nblocks; ++b) acc += parts[b * stride + i];
    dst[i] += static_cast<float>(acc);
  }
}
}  // namespace

namespace {
// A layer's four weights, packed into this thread's scratch for the forward (out = x W^T +
// b, pack_weight_forward) or for dinp (dx = dout W, pack_weight_dinp); valid until the
// next call on the same thread.
struct LayerPacks {
  const float *qkv, *proj, *fc, *fcproj;
};
LayerPacks pack_layer_weights(bool dinp, const float* qkv_w, const float* proj_w, const float* fc_w,
                              const float* fcproj_w, int64_t C, int64_t F) {
  thread_local AlignedScratch scratch[4];
  // Weight w is (OC, C): packed as a (C x OC) B for the forward, (OC x C) for dinp.
  auto pack = [&](AlignedScratch& s, const float* w, int64_t c, int64_t oc) -> const float* {
    float* b = s.get(static_cast<size_t>(dinp ? cpu::panels_floats(oc, c) : cpu::panels_floats(c, oc)));
    if (dinp)
      cpu::pack_weight_dinp(b, w, c, oc);
    else
      cpu::pack_weight_forward(b, w, c, oc);
    return b;
  };
  return {pack(scratch[0], qkv_w, C, 3 * C), pack(scratch[1], proj_w, C, C), pack(scratch[2], fc_w, C, F),
          pack(scratch[3], fcproj_w, F, C)};
}
}  // namespace

bool layer_forward_fused_cpu_usable(const AttentionSpec& spec, const AttentionShape& shape, int64_t F) {
  const int64_t C = shape.H * shape.d;
  return g_layer_fusion.load() && attention_packed_cpu_usable(spec, shape) && cpu::gemm_avx512_usable(C, 3 * C) &&
         cpu::gemm_avx512_usable(C, C) && cpu::gemm_avx512_usable(C, F) && cpu::gemm_avx512_usable(F, C);
}

void layer_forward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                             const LayerForwardArgs& a) {
  const int64_t B = shape.B, T = shape.Nq, C = shape.H * shape.d;
  // The four weights packed once (as each matmul_forward_avx512 call would).
  const auto [bq, bp, bf, bf2] = pack_layer_weights(false, a.qkv_w, a.proj_w, a.fc_w, a.fcproj_w, C, F);
  const int64_t per = layer_block_samples(T), nblocks = (B + per - 1) / per;
  const ResidualRows res1_ctx{a.inp, C};
#pragma omp parallel
  {
    // Without a.fch_gelu the GELU's output lives only in this per-thread block scratch,
    // from which fcproj reads it (the backward recomputes it).
    thread_local AlignedScratch gelu_scratch;
    float* hb = a.fch_gelu == nullptr ? gelu_scratch.get(static_cast<size_t>(per * T * F)) : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const auto [b0, b1, r0, rows] = SampleBlock(blk, per, B, T);
      float* h = hb != nullptr ? hb : a.fch_gelu + r0 * F;  // rows [r0, r0 + rows) of gelu(fch)
      const GeluForwardRows gelu_ctx{a.fch, h, F, r0};
      const ResidualRows res2_ctx{a.res1 + r0 * C, C};
      // A LayerNorm over the block, in groups of kRowBlock rows as layernorm_forward.
      auto layernorm = [&](float* out, float* mean, float* rstd, const float* x, const float* w, const float* b) {
        for (int64_t g = r0; g < r0 + rows; g += kRowBlock)
          layernorm_forward_rows(out + g * C, mean + g, rstd + g, x + g * C, w, b, std::min(kRowBlock, r0 + rows - g),
                                 C);
      };
      layernorm(a.ln1, a.ln1_mean, a.ln1_rstd, a.inp, a.ln1_w, a.ln1_b);
      cpu::matmul_rows_avx512(a.qkv, a.ln1, bq, a.qkv_b, r0, rows, C, 3 * C);
      attention_forward_packed_samples_cpu(spec, shape, a.qkv, a.atty, a.lse, a.attn_fro, a.jac_fro, b0, b1);
      cpu::matmul_rows_avx512(a.res1, a.atty, bp, a.proj_b, r0, rows, C, C, {residual_rows, &res1_ctx});
      layernorm(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, a.ln2_w, a.ln2_b);
      cpu::matmul_rows_avx512(a.fch, a.ln2, bf, a.fc_b, r0, rows, C, F, {gelu_forward_rows, &gelu_ctx});
      cpu::matmul_rows_avx512(a.res2 + r0 * C, h, bf2, a.fcproj_b, 0, rows, F, C, {residual_rows, &res2_ctx});
    }
  }
}

void layer_backward_fused_cpu(const AttentionSpec& spec, const AttentionShape& shape, int64_t F,
                              const LayerBackwardArgs& a) {
  const int64_t B = shape.B, T = shape.Nq, C = shape.H * shape.d;
  thread_local AlignedScratch parts_buf;
  thread_local std::vector<double> dbparts_buf;
  // The weights packed for dinp = dout @ W (matmul_rows_avx512 with C and OC swapped).
  const auto [bq, bp, bf, bf2] = pack_layer_weights(true, a.qkv_w, a.proj_w, a.fc_w, a.fcproj_w, C, F);
  const int64_t per = layer_block_samples(T), nblocks = (B + per - 1) / per;
  const int64_t G = (per * T + kRowBlock - 1) / kRowBlock;  // LayerNorm row groups per block
  // One block's shares, floats: dW of fcproj (C, F), fc (F, C), proj (C, C), qkv (3C, C),
  // then LN2's and LN1's (sw, sb) per row group; doubles: the four dbias.
  const int64_t o_fcproj = 0, o_fc = o_fcproj + C * F, o_proj = o_fc + F * C, o_qkv = o_proj + C * C,
                o_ln2 = o_qkv + 3 * C * C, o_ln1 = o_ln2 + G * 2 * C, stride = o_ln1 + G * 2 * C;
  const int64_t d_fcproj = 0, d_fc = d_fcproj + cpu::dbias_partial_doubles(C),
                d_proj = d_fc + cpu::dbias_partial_doubles(F), d_qkv = d_proj + cpu::dbias_partial_doubles(C),
                dstride = d_qkv + cpu::dbias_partial_doubles(3 * C);
  float* parts = parts_buf.get(static_cast<size_t>(nblocks * stride));
  dbparts_buf.resize(static_cast<size_t>(nblocks * dstride));
  double* dbparts = dbparts_buf.data();
#pragma omp parallel
  {
    // Without a.fch_gelu the GELU's output is recomputed per block into this scratch, by
    // the pass that forms dbig (the same exp), instead of read back from memory. dbig, dln
    // and dqkv live only within a block: per-thread block scratch that stays in L2 (as
    // whole-batch buffers every block wrote fresh lines, ~13 MB a layer, out to memory).
    thread_local AlignedScratch gelu_scratch, dbig_scratch, dln_scratch, dqkv_scratch;
    float* hb = a.fch_gelu == nullptr ? gelu_scratch.get(static_cast<size_t>(per * T * F)) : nullptr;
    float* dbig = dbig_scratch.get(static_cast<size_t>(per * T * F));
    float* dln = dln_scratch.get(static_cast<size_t>(per * T * C));
    float* dqkv = dqkv_scratch.get(static_cast<size_t>(per * T * 3 * C));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const auto [b0, b1, r0, rows] = SampleBlock(blk, per, B, T);
      float* part = parts + blk * stride;
      double* dbpart = dbparts + blk * dstride;
      float* dres = a.dres + r0 * C;  // the block's rows of dres (the scratch: rows from 0)
      // fcproj through the GELU: dbig = gelu'(fch) (dres @ W_fcproj); dW_fcproj = dres^T gelu(fch).
      const GeluBackwardRows gelu_ctx{a.fch + r0 * F, F, hb, 0};
      cpu::matmul_rows_avx512(dbig, dres, bf2, nullptr, 0, rows, C, F, {gelu_backward_rows, &gelu_ctx});
      const float* h = hb != nullptr ? hb : a.fch_gelu + r0 * F;
      cpu::dweight_rows_partial_avx512(part + o_fcproj, dbpart + d_fcproj, dres, h, 0, rows, F, C);
      // fc: dln = dbig @ W_fc; dW_fc = dbig^T ln2.
      cpu::matmul_rows_avx512(dln, dbig, bf, nullptr, 0, rows, F, C);
      cpu::dweight_rows_partial_avx512(part + o_fc, dbpart + d_fc, dbig, a.ln2 + r0 * C, 0, rows, C, F);
      // dres += d/d x through a LayerNorm of x (dout: dln), its (sw, sb) per row group into
      // the block's share at offset o (groups past a short block's end: zeros).
      auto layernorm_backward = [&](int64_t o, const float* x, const float* w, const float* mean, const float* rstd) {
        for (int64_t g = 0; g < G; ++g) {
          const int64_t i0 = g * kRowBlock, n = std::min(kRowBlock, rows - i0);
          float* sw = part + o + g * 2 * C;
          if (n <= 0)
            std::fill(sw, sw + 2 * C, 0.0f);
          else
            layernorm_backward_rows(dres + i0 * C, sw, sw + C, dln + i0 * C, x + (r0 + i0) * C, w, mean + r0 + i0,
                                    rstd + r0 + i0, n, C);
        }
      };
      // LN2: dres += d/d res1 through the LayerNorm.
      layernorm_backward(o_ln2, a.res1, a.ln2_w, a.ln2_mean, a.ln2_rstd);
      // proj: dln = dres @ W_proj (d/d atty); dW_proj = dres^T atty.
      cpu::matmul_rows_avx512(dln, dres, bp, nullptr, 0, rows, C, C);
      cpu::dweight_rows_partial_avx512(part + o_proj, dbpart + d_proj, dres, a.atty + r0 * C, 0, rows, C, C);
      // attention: dqkv of these samples (pointers at the block's first sample).
      attention_backward_packed_samples_cpu(spec, shape, a.qkv + r0 * 3 * C, a.atty + r0 * C, dln,
                                            a.lse + b0 * shape.H * T, dqkv, 0, b1 - b0);
      // qkv: dln = dqkv @ W_qkv; dW_qkv = dqkv^T ln1.
      cpu::matmul_rows_avx512(dln, dqkv, bq, nullptr, 0, rows, 3 * C, C);
      cpu::dweight_rows_partial_avx512(part + o_qkv, dbpart + d_qkv, dqkv, a.ln1 + r0 * C, 0, rows, C, 3 * C);
      // LN1: dres += d/d inp through the LayerNorm (dres already holds the residual path).
      layernorm_backward(o_ln1, a.inp, a.ln1_w, a.ln1_mean, a.ln1_rstd);
    }
  }
  // The blocks' shares, added in block order.
  add_block_sums({{a.g_fcproj_w, o_fcproj, C * F},
                  {a.g_fc_w, o_fc, F * C},
                  {a.g_proj_w, o_proj, C * C},
                  {a.g_qkv_w, o_qkv, 3 * C * C}},
                 parts, stride, nblocks);
  add_block_sums(a.g_fcproj_b, dbparts + d_fcproj, dstride, nblocks, C);
  add_block_sums(a.g_fc_b, dbparts + d_fc, dstride, nblocks, F);
  add_block_sums(a.g_proj_b, dbparts + d_proj, dstride, nblocks, C);
  add_block_sums(a.g_qkv_b, dbparts + d_qkv, dstride, nblocks, 3 * C);
  // LayerNorm: the groups of every block in order (float32 within a group, float64 across).
  for (const auto& [o, gw, gb] : {std::tuple{o_ln2, a.g_ln2_w, a.g_ln2_b}, std::tuple{o_ln1, a.g_ln1_w, a.g_ln1_b}}) {
    thread_local std::vector<double> acc;
    acc.assign(static_cast<size_t>(2 * C), 0.0);
    for (int64_t blk = 0; blk < nblocks; ++blk)
      for (int64_t g = 0; g < G; ++g) {
        const float* pg = parts + blk * stride + o + g * 2 * C;
        for (int64_t c = 0; c < 2 * C; ++c) acc[static_cast<size_t>(c)] += pg[c];
      }
    for (int64_t c = 0; c < C; ++c) {
      gw[c] += static_cast<float>(acc[static_cast<size_t>(c)]);
      gb[c] += static_cast<float>(acc[static_cast<size_t>(C + c)]);
    }
  }
}

}  // namespace attnsweep
