#include "worker/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "experiments/rng.h"
#include "kernels/ops.h"

namespace attnsweep {

namespace {

void zero(float* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * sizeof(float)); }

// Copies of one head's row (hd = 16 floats here) are inline loops, not a memcpy call per
// 64 bytes (the calls were 4 % of a training step). GCC turns such loops back into memcpy
// calls unless the function that holds them is compiled without that pattern matching,
// and a function with its own optimize attribute is not inlined: so the attribute goes on
// each caller, and copy_row is a plain inline function.
#define ATTNSWEEP_INLINE_COPIES __attribute__((optimize("no-tree-loop-distribute-patterns")))

inline void copy_row(float* __restrict dst, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = src[j];
}

// qkv (B, T, 3C) -> q, k, v (B, H, T, hd): the layout the attention kernel wants.
ATTNSWEEP_INLINE_COPIES void split_heads(float* q, float* k, float* v, const float* qkv, int64_t B, int64_t T, int64_t H, int64_t hd) {
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

// dq, dk, dv (B, H, T, hd) -> dqkv (B, T, 3C), overwritten.
ATTNSWEEP_INLINE_COPIES void merge_heads3(float* dqkv, const float* dq, const float* dk, const float* dv, int64_t B, int64_t T, int64_t H,
                  int64_t hd) {
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

// (B, H, T, hd) <-> (B, T, C), overwriting the destination.
ATTNSWEEP_INLINE_COPIES void heads_to_rows(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      copy_row(out + bt * H * hd + h * hd, in + ((b * H + h) * T + t) * hd, hd);
  }
}
ATTNSWEEP_INLINE_COPIES void rows_to_heads(float* out, const float* in, int64_t B, int64_t T, int64_t H, int64_t hd) {
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h)
      copy_row(out + ((b * H + h) * T + t) * hd, in + bt * H * hd + h * hd, hd);
  }
}

// out (B, C) = mean of inp (B, T, C) over the t with mask[b, t] != 0 (0 when none are).
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
// dinp (B, T, C) += dout (B, C) / n_b on the unmasked rows.
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

// Points each member of a struct of float* at consecutive slices of one buffer.
template <class Struct, size_t K>
std::vector<float> carve(Struct& s, const int64_t (&sizes)[K]) {
  static_assert(sizeof(Struct) == K * sizeof(float*), "one size per member");
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  std::vector<float> mem(static_cast<size_t>(total), 0.0f);
  float** ptrs = reinterpret_cast<float**>(&s);
  int64_t off = 0;
  for (size_t i = 0; i < K; ++i) {
    ptrs[i] = mem.data() + off;
    off += sizes[i];
  }
  return mem;
}

}  // namespace

Model::Model(const ModelConfig& cfg) : cfg_(cfg) {
  if (cfg.dim <= 0 || cfg.heads <= 0 || cfg.dim % cfg.heads != 0)
    throw std::runtime_error("model: heads " + std::to_string(cfg.heads) + " must divide dim " + std::to_string(cfg.dim));
  const int64_t C = cfg.dim, L = cfg.layers, T = cfg.seq(), in = cfg.in_dim, F = cfg.mlp_ratio * cfg.dim;
  int64_t K = cfg.classes;
  const bool tf = cfg.head != Head::readout;  // the transformer (classify, token_regress)
  if (cfg.head == Head::token_regress) {
    if (cfg.cls) throw std::runtime_error("token_regress model: predicts every token; no CLS token");
    if (cfg.pad_id >= 0) throw std::runtime_error("token_regress model: no padding mask (pad_id must be -1)");
    K = 1;  // one value per token
  }
  if (cfg.pad_id >= 0 && (cfg.vocab <= 0 || cfg.pad_id >= cfg.vocab))
    throw std::runtime_error("model: pad_id " + std::to_string(cfg.pad_id) + " needs token ids (vocab " +
                             std::to_string(cfg.vocab) + " > pad_id)");
  if (!tf) {
    if (cfg.in_dim != cfg.dim) throw std::runtime_error("readout model: in_dim must equal dim (no embedding)");
    if (cfg.layers != 1) throw std::runtime_error("readout model: one attention layer");
    if (cfg.tokens < 2) throw std::runtime_error("readout model: needs at least one prompt token and the query");
  }
  struct Row {
    const char* name;
    std::vector<int64_t> shape;
  };
  // Buffer order = ParameterTensors order; a readout model has only qkv_w.
  const Row rows[kNumParameterTensors] = {
      {cfg.vocab > 0 ? "wte" : "patch_w",
       !tf ? std::vector<int64_t>{0} : cfg.vocab > 0 ? std::vector<int64_t>{cfg.vocab, C} : std::vector<int64_t>{C, in}},
      {"qkv_w", {L, 3 * C, C}},
      {"attproj_w", {tf ? L : 0, C, C}},
      {"fc_w", {tf ? L : 0, F, C}},
      {"fcproj_w", {tf ? L : 0, C, F}},
      {"head_w", {tf ? K : 0, C}},
      {"patch_b", {tf && cfg.vocab == 0 ? C : 0}},
      {"wpe", {tf ? T : 0, C}},
      {"cls", {tf && cfg.cls ? C : 0}},
      {"ln1_w", {tf ? L : 0, C}},
      {"ln1_b", {tf ? L : 0, C}},
      {"qkv_b", {tf ? L : 0, 3 * C}},
      {"attproj_b", {tf ? L : 0, C}},
      {"ln2_w", {tf ? L : 0, C}},
      {"ln2_b", {tf ? L : 0, C}},
      {"fc_b", {tf ? L : 0, F}},
      {"fcproj_b", {tf ? L : 0, C}},
      {"lnf_w", {tf ? C : 0}},
      {"lnf_b", {tf ? C : 0}},
      {"head_b", {tf ? K : 0}},
  };
  int64_t sizes[kNumParameterTensors];
  int64_t off = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    TensorInfo t;
    t.name = rows[i].name;
    t.shape = rows[i].shape;
    t.size = 1;
    for (int64_t d : t.shape) t.size *= d;
    t.offset = off;
    off += t.size;
    sizes[i] = t.size;
    if (i == kNumDecayedTensors - 1) decayed_ = off;
    tensors_.push_back(std::move(t));
  }
  params_mem_ = carve(p_, sizes);
  grads_mem_ = carve(g_, sizes);
}

void Model::init(uint64_t init_seed, double init_std) {
  const int64_t C = cfg_.dim, F = cfg_.mlp_ratio * cfg_.dim;
  // fan_in of each tensor's nn.Linear (0: not a Linear)
  const int64_t fan_in[kNumParameterTensors] = {cfg_.in_dim, C, C, C, F, C, cfg_.in_dim, 0, 0, 0, 0, C, C, 0, 0, C, F, 0, 0, C};
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const TensorInfo& t = tensors_[static_cast<size_t>(i)];
    float* w = params_mem_.data() + t.offset;
    // One stream per tensor: the draws of a tensor do not depend on the others' sizes.
    Rng rng(seed_of({init_seed, 0x1417ull, static_cast<uint64_t>(i)}));
    const bool matrix = i < kNumDecayedTensors;
    const std::string& n = t.name;
    if (n == "wte") {  // nn.Embedding: N(0, 1), or N(0, init_std^2)
      const double sd = init_std > 0 ? init_std : 1.0;
      for (int64_t j = 0; j < t.size; ++j) w[j] = static_cast<float>(sd * rng.normal());
    } else if (n == "ln1_w" || n == "ln2_w" || n == "lnf_w") {
      std::fill(w, w + t.size, 1.0f);
    } else if (n == "ln1_b" || n == "ln2_b" || n == "lnf_b") {
      std::fill(w, w + t.size, 0.0f);
    } else if (n == "wpe" || n == "cls") {
      for (int64_t j = 0; j < t.size; ++j) w[j] = static_cast<float>(0.02 * rng.normal());
    } else if (init_std > 0) {
      for (int64_t j = 0; j < t.size; ++j) w[j] = matrix ? static_cast<float>(init_std * rng.normal()) : 0.0f;
    } else {
      const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in[i]));
      for (int64_t j = 0; j < t.size; ++j) w[j] = static_cast<float>(bound * (2.0 * rng.uniform() - 1.0));
    }
  }
}

void Model::ensure_batch(int64_t B) {
  if (B <= cap_B_) return;
  const int64_t C = cfg_.dim, L = cfg_.layers, T = cfg_.seq(), N = cfg_.tokens, H = cfg_.heads, K = cfg_.classes,
                F = cfg_.mlp_ratio * cfg_.dim;
  const int64_t BT = B * T, BTC = BT * C, LBTC = L * BTC, LBT = L * BT;
  const int64_t BK = cfg_.head == Head::token_regress ? B * N : B * std::max<int64_t>(K, 1);
  // Acts member order: emb, encoded, ln1, ln1_mean, ln1_rstd, qkv, q, k, v, atty, lse,
  // atty_un, res1, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res2, lnf, lnf_mean,
  // lnf_rstd, pooled, logits, probs.
  const int64_t acts[] = {B * N * C, BTC,  LBTC, LBT,      LBT,      3 * LBTC, LBTC, LBTC, LBTC,
                          LBTC,      L * B * H * T, LBTC, LBTC, LBTC, LBT,      LBT,  L * BT * F,
                          L * BT * F, LBTC, BTC,  BT,       BT,       B * C,    BK,   BK};
  acts_mem_ = carve(a_, acts);
  const int64_t BTF = BT * F;
  // Scratch member order: dres, dln, dbig, dbig2, dqkv, dq, dk, dv, datty, dpooled,
  // dlogits, demb.
  const int64_t scratch[] = {BTC, BTC, BTF, BTF, 3 * BTC, BTC, BTC, BTC, BTC, B * C, BK, B * N * C};
  scratch_mem_ = carve(s_, scratch);
  norm_attn_.assign(static_cast<size_t>(B * H), 0.0);
  norm_jac_.assign(static_cast<size_t>(B * H), 0.0);
  cap_B_ = B;
}

ForwardStats Model::forward(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                            bool collect_norms) {
  ensure_batch(B);
  B_ = B;
  x_ = x;
  y_class_ = y_class;
  y_value_ = y_value;
  return cfg_.head == Head::readout ? forward_readout(collect_norms) : forward_classify(collect_norms);
}

void Model::backward() {
  std::fill(grads_mem_.begin(), grads_mem_.end(), 0.0f);
  if (cfg_.head == Head::readout) backward_readout();
  else backward_classify();
}

// Mean over the batch of per-(b, h) norms -> stats[l, h].
static void add_norm_means(std::vector<double>& dst, const std::vector<double>& src, int64_t l, int64_t B, int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    double s = 0;
    for (int64_t b = 0; b < B; ++b) s += src[static_cast<size_t>(b * H + h)];
    dst[static_cast<size_t>(l * H + h)] = s / static_cast<double>(B);
  }
}

ForwardStats Model::forward_classify(bool collect_norms) {
  const int64_t B = B_, C = cfg_.dim, L = cfg_.layers, T = cfg_.seq(), N = cfg_.tokens, H = cfg_.heads,
                hd = cfg_.head_dim(), K = cfg_.classes, F = cfg_.mlp_ratio * C, off = cfg_.cls ? 1 : 0;
  const int64_t BT = B * T, BTC = BT * C;
  ForwardStats st;
  if (collect_norms) {
    st.attn_fro.assign(static_cast<size_t>(L * H), 0.0);
    st.jac_fro.assign(static_cast<size_t>(L * H), 0.0);
  }
  // embedding: encoded[b, t] = (CLS | x[b, t - off] @ patch_w^T + patch_b | wte[id]) + wpe[t]
  if (cfg_.vocab > 0) {
    ids_.resize(static_cast<size_t>(B * N));
    for (int64_t i = 0; i < B * N; ++i) {
      const float id = x_[i];
      if (!(id >= 0 && id < static_cast<float>(cfg_.vocab)) || id != static_cast<float>(static_cast<int32_t>(id)))
        throw std::runtime_error("model: token id " + std::to_string(id) + " is not an integer in [0, " +
                                 std::to_string(cfg_.vocab) + ")");
      ids_[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    embedding_forward(a_.emb, ids_.data(), p_.patch_w, nullptr, B, N, C);
    build_key_mask();
  } else {
    matmul_forward(a_.emb, x_, p_.patch_w, p_.patch_b, B * N, cfg_.in_dim, C);
  }
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < BT; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    const float* src = t < off ? p_.cls : a_.emb + (b * N + t - off) * C;
    const float* pos = p_.wpe + t * C;
    float* dst = a_.encoded + bt * C;
    for (int64_t c = 0; c < C; ++c) dst[c] = src[c] + pos[c];
  }
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = collect_norms;
  const AttentionShape shape{B, H, T, T, hd, hd};
  for (int64_t l = 0; l < L; ++l) {
    const float* inp = l == 0 ? a_.encoded : a_.res2 + (l - 1) * BTC;
    float* ln1 = a_.ln1 + l * BTC;
    float* qkv = a_.qkv + l * 3 * BTC;
    float *q = a_.q + l * BTC, *k = a_.k + l * BTC, *v = a_.v + l * BTC, *atty = a_.atty + l * BTC;
    float* lse = a_.lse + l * B * H * T;
    float* atty_un = a_.atty_un + l * BTC;
    float* res1 = a_.res1 + l * BTC;
    float* ln2 = a_.ln2 + l * BTC;
    float* fch = a_.fch + l * BT * F;
    float* fch_gelu = a_.fch_gelu + l * BT * F;
    float* res2 = a_.res2 + l * BTC;
    layernorm_forward(ln1, a_.ln1_mean + l * BT, a_.ln1_rstd + l * BT, inp, p_.ln1_w + l * C, p_.ln1_b + l * C, BT, C);
    matmul_forward(qkv, ln1, p_.qkv_w + l * 3 * C * C, p_.qkv_b + l * 3 * C, BT, C, 3 * C);
    split_heads(q, k, v, qkv, B, T, H, hd);
    attention_forward_cpu(spec, shape, q, k, v, mask_, atty, lse, norm_attn_.data(), norm_jac_.data());
    if (collect_norms && mask_ != nullptr) norms_of_real_queries(spec, q, k, v);
    if (collect_norms) {
      add_norm_means(st.attn_fro, norm_attn_, l, B, H);
      add_norm_means(st.jac_fro, norm_jac_, l, B, H);
    }
    heads_to_rows(atty_un, atty, B, T, H, hd);
    // attproj goes straight into res1, then the residual is added in place.
    matmul_forward(res1, atty_un, p_.attproj_w + l * C * C, p_.attproj_b + l * C, BT, C, C);
    residual_forward(res1, res1, inp, BTC);
    layernorm_forward(ln2, a_.ln2_mean + l * BT, a_.ln2_rstd + l * BT, res1, p_.ln2_w + l * C, p_.ln2_b + l * C, BT, C);
    matmul_forward(fch, ln2, p_.fc_w + l * F * C, p_.fc_b + l * F, BT, C, F);
    gelu_forward(fch_gelu, fch, BT * F);
    matmul_forward(res2, fch_gelu, p_.fcproj_w + l * C * F, p_.fcproj_b + l * C, BT, F, C);
    residual_forward(res2, res2, res1, BTC);
  }
  layernorm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, a_.res2 + (L - 1) * BTC, p_.lnf_w, p_.lnf_b, BT, C);
  if (cfg_.head == Head::token_regress) {
    forward_token_head(st);
    return st;
  }
  if (cfg_.cls) {
    for (int64_t b = 0; b < B; ++b) std::memcpy(a_.pooled + b * C, a_.lnf + b * T * C, static_cast<size_t>(C) * sizeof(float));
  } else if (mask_ != nullptr) {
    masked_meanpool_forward(a_.pooled, a_.lnf, mask_, B, T, C);
  } else {
    meanpool_forward(a_.pooled, a_.lnf, B, T, C);
  }
  matmul_forward(a_.logits, a_.pooled, p_.head_w, p_.head_b, B, C, K);
  st.loss = softmax_crossentropy_forward(a_.probs, &st.correct, a_.logits, y_class_, B, K);
  return st;
}

void Model::backward_classify() {
  const int64_t B = B_, C = cfg_.dim, L = cfg_.layers, T = cfg_.seq(), N = cfg_.tokens, H = cfg_.heads,
                hd = cfg_.head_dim(), K = cfg_.classes, F = cfg_.mlp_ratio * C, off = cfg_.cls ? 1 : 0;
  const int64_t BT = B * T, BTC = BT * C;
  if (cfg_.head == Head::token_regress) {
    backward_token_head();  // fills s_.dln
  } else {
    zero(s_.dlogits, B * K);
    softmax_crossentropy_backward(s_.dlogits, a_.probs, y_class_, 1.0f, B, K);
    zero(s_.dpooled, B * C);
    matmul_backward(s_.dpooled, g_.head_w, g_.head_b, s_.dlogits, a_.pooled, p_.head_w, B, C, K);
    zero(s_.dln, BTC);
    if (cfg_.cls) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t c = 0; c < C; ++c) s_.dln[b * T * C + c] += s_.dpooled[b * C + c];
    } else if (mask_ != nullptr) {
      masked_meanpool_backward(s_.dln, s_.dpooled, mask_, B, T, C);
    } else {
      meanpool_backward(s_.dln, s_.dpooled, B, T, C);
    }
  }
  zero(s_.dres, BTC);
  layernorm_backward(s_.dres, g_.lnf_w, g_.lnf_b, s_.dln, a_.res2 + (L - 1) * BTC, p_.lnf_w, a_.lnf_mean, a_.lnf_rstd,
                     BT, C);
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = false;
  const AttentionShape shape{B, H, T, T, hd, hd};
  for (int64_t l = L - 1; l >= 0; --l) {
    const float* inp = l == 0 ? a_.encoded : a_.res2 + (l - 1) * BTC;
    // dres holds d loss / d res2[l]; res2 = res1 + fcproj, so it is also d/d fcproj and
    // (after the MLP's contribution is added) d/d res1.
    zero(s_.dbig2, BT * F);
    matmul_backward(s_.dbig2, g_.fcproj_w + l * C * F, g_.fcproj_b + l * C, s_.dres, a_.fch_gelu + l * BT * F,
                    p_.fcproj_w + l * C * F, BT, F, C);
    zero(s_.dbig, BT * F);
    gelu_backward(s_.dbig, a_.fch + l * BT * F, s_.dbig2, BT * F);
    zero(s_.dln, BTC);
    matmul_backward(s_.dln, g_.fc_w + l * F * C, g_.fc_b + l * F, s_.dbig, a_.ln2 + l * BTC, p_.fc_w + l * F * C, BT,
                    C, F);
    layernorm_backward(s_.dres, g_.ln2_w + l * C, g_.ln2_b + l * C, s_.dln, a_.res1 + l * BTC, p_.ln2_w + l * C,
                       a_.ln2_mean + l * BT, a_.ln2_rstd + l * BT, BT, C);
    // dres = d/d res1 = d/d attproj (and the residual path to inp).
    zero(s_.dln, BTC);
    matmul_backward(s_.dln, g_.attproj_w + l * C * C, g_.attproj_b + l * C, s_.dres, a_.atty_un + l * BTC,
                    p_.attproj_w + l * C * C, BT, C, C);
    rows_to_heads(s_.datty, s_.dln, B, T, H, hd);
    attention_backward_cpu(spec, shape, a_.q + l * BTC, a_.k + l * BTC, a_.v + l * BTC, mask_, a_.atty + l * BTC,
                           s_.datty, a_.lse + l * B * H * T, s_.dq, s_.dk, s_.dv);
    merge_heads3(s_.dqkv, s_.dq, s_.dk, s_.dv, B, T, H, hd);
    zero(s_.dln, BTC);
    matmul_backward(s_.dln, g_.qkv_w + l * 3 * C * C, g_.qkv_b + l * 3 * C, s_.dqkv, a_.ln1 + l * BTC,
                    p_.qkv_w + l * 3 * C * C, BT, C, 3 * C);
    layernorm_backward(s_.dres, g_.ln1_w + l * C, g_.ln1_b + l * C, s_.dln, inp, p_.ln1_w + l * C,
                       a_.ln1_mean + l * BT, a_.ln1_rstd + l * BT, BT, C);
  }
  // dres = d/d encoded: positions and CLS sum over the batch (in batch order), the
  // patch tokens go back through the embedding.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t b = 0; b < B; ++b) {
      const float* d = s_.dres + (b * T + t) * C;
      float* gp = g_.wpe + t * C;
      for (int64_t c = 0; c < C; ++c) gp[c] += d[c];
      if (t < off)
        for (int64_t c = 0; c < C; ++c) g_.cls[c] += d[c];
    }
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(s_.demb + b * N * C, s_.dres + (b * T + off) * C, static_cast<size_t>(N * C) * sizeof(float));
  if (cfg_.vocab > 0) embedding_backward(g_.patch_w, nullptr, s_.demb, ids_.data(), B, N, C);
  else matmul_backward(nullptr, g_.patch_w, g_.patch_b, s_.demb, x_, p_.patch_w, B * N, cfg_.in_dim, C);
}

void Model::build_key_mask() {
  mask_ = nullptr;
  if (cfg_.pad_id < 0) return;
  const int64_t B = B_, N = cfg_.tokens, T = cfg_.seq(), off = cfg_.cls ? 1 : 0;
  key_mask_.resize(static_cast<size_t>(B * T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      key_mask_[static_cast<size_t>(b * T + t)] =
          t < off || ids_[static_cast<size_t>(b * N + t - off)] != cfg_.pad_id ? 1.0f : 0.0f;
  mask_ = key_mask_.data();
}

// The kernel masks keys, not queries: the rows of padding queries are in its norms. On
// logged steps only, the attention of each sample's real query rows (CLS and tokens) is
// computed again for their norms, from q gathered into [1, H, n_b, hd].
void Model::norms_of_real_queries(const AttentionSpec& spec, const float* q, const float* k, const float* v) {
  const int64_t B = B_, H = cfg_.heads, T = cfg_.seq(), hd = cfg_.head_dim();
  std::vector<float> qb, ob;
  std::vector<int64_t> rows;
  for (int64_t b = 0; b < B; ++b) {
    rows.clear();
    for (int64_t t = 0; t < T; ++t)
      if (mask_[b * T + t] != 0.0f) rows.push_back(t);
    const int64_t n = static_cast<int64_t>(rows.size());
    double* attn = norm_attn_.data() + b * H;
    double* jac = norm_jac_.data() + b * H;
    if (n == 0) {
      std::fill(attn, attn + H, 0.0);
      std::fill(jac, jac + H, 0.0);
      continue;
    }
    qb.resize(static_cast<size_t>(H * n * hd));
    ob.resize(qb.size());
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(qb.data() + (h * n + i) * hd, q + ((b * H + h) * T + rows[static_cast<size_t>(i)]) * hd,
                    static_cast<size_t>(hd) * sizeof(float));
    const AttentionShape one{1, H, n, T, hd, hd};
    attention_forward_cpu(spec, one, qb.data(), k + b * H * T * hd, v + b * H * T * hd, mask_ + b * T, ob.data(),
                          nullptr, attn, jac);
  }
}

// pred (B, N) = lnf (B, N, C) @ head_w^T + head_b; loss = mean over B N of (pred - y)^2.
void Model::forward_token_head(ForwardStats& st) {
  const int64_t BN = B_ * cfg_.tokens;
  matmul_forward(a_.logits, a_.lnf, p_.head_w, p_.head_b, BN, cfg_.dim, 1);
  st.loss = mse_forward(a_.logits, y_value_, BN);
}

void Model::backward_token_head() {
  const int64_t BN = B_ * cfg_.tokens, C = cfg_.dim;
  zero(s_.dlogits, BN);
  mse_backward(s_.dlogits, a_.logits, y_value_, 1.0f, BN);
  zero(s_.dln, BN * C);
  matmul_backward(s_.dln, g_.head_w, g_.head_b, s_.dlogits, a_.lnf, p_.head_w, BN, C, 1);
}

ATTNSWEEP_INLINE_COPIES ForwardStats Model::forward_readout(bool collect_norms) {
  const int64_t B = B_, C = cfg_.dim, N = cfg_.tokens, H = cfg_.heads, hd = cfg_.head_dim(), Lp = N - 1;
  ForwardStats st;
  // qkv of every token (the query's K, V and the prompt's Q are not used: cheap here).
  matmul_forward(a_.qkv, x_, p_.qkv_w, nullptr, B * N, C, 3 * C);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      copy_row(a_.q + (b * H + h) * hd, a_.qkv + ((b * N + N - 1) * 3 * C) + h * hd, hd);
      for (int64_t n = 0; n < Lp; ++n) {
        const float* src = a_.qkv + (b * N + n) * 3 * C;
        copy_row(a_.k + ((b * H + h) * Lp + n) * hd, src + C + h * hd, hd);
        copy_row(a_.v + ((b * H + h) * Lp + n) * hd, src + 2 * C + h * hd, hd);
      }
    }
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = collect_norms;
  const AttentionShape shape{B, H, 1, Lp, hd, hd};
  attention_forward_cpu(spec, shape, a_.q, a_.k, a_.v, nullptr, a_.atty, a_.lse, norm_attn_.data(), norm_jac_.data());
  if (collect_norms) {
    st.attn_fro.assign(static_cast<size_t>(H), 0.0);
    st.jac_fro.assign(static_cast<size_t>(H), 0.0);
    add_norm_means(st.attn_fro, norm_attn_, 0, B, H);
    add_norm_means(st.jac_fro, norm_jac_, 0, B, H);
  }
  // prediction = last coordinate of the query's output = head H-1's last coordinate
  for (int64_t b = 0; b < B; ++b) a_.logits[b] = a_.atty[((b * H + H - 1) + 1) * hd - 1];
  st.loss = mse_forward(a_.logits, y_value_, B);
  return st;
}

ATTNSWEEP_INLINE_COPIES void Model::backward_readout() {
  const int64_t B = B_, C = cfg_.dim, N = cfg_.tokens, H = cfg_.heads, hd = cfg_.head_dim(), Lp = N - 1;
  zero(s_.dlogits, B);
  mse_backward(s_.dlogits, a_.logits, y_value_, 1.0f, B);
  zero(s_.datty, B * H * hd);
  for (int64_t b = 0; b < B; ++b) s_.datty[((b * H + H - 1) + 1) * hd - 1] = s_.dlogits[b];
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = false;
  const AttentionShape shape{B, H, 1, Lp, hd, hd};
  attention_backward_cpu(spec, shape, a_.q, a_.k, a_.v, nullptr, a_.atty, s_.datty, a_.lse, s_.dq, s_.dk, s_.dv);
  zero(s_.dqkv, B * N * 3 * C);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      copy_row(s_.dqkv + (b * N + N - 1) * 3 * C + h * hd, s_.dq + (b * H + h) * hd, hd);
      for (int64_t n = 0; n < Lp; ++n) {
        float* dst = s_.dqkv + (b * N + n) * 3 * C;
        copy_row(dst + C + h * hd, s_.dk + ((b * H + h) * Lp + n) * hd, hd);
        copy_row(dst + 2 * C + h * hd, s_.dv + ((b * H + h) * Lp + n) * hd, hd);
      }
    }
  matmul_backward(nullptr, g_.qkv_w, nullptr, s_.dqkv, x_, p_.qkv_w, B * N, C, 3 * C);
}

}  // namespace attnsweep
