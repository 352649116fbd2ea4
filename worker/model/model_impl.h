// BasicModel (worker/model/model.h): the parameter layout and initialisation, the buffers, and
// the forward and hand-written backward of the three heads, one op sequence for every
// backend; included by the translation units that instantiate it, and by no header (its
// unnamed namespaces are per translation unit: worker/model/model.cpp, the
// CPU; worker/training/cuda_trainer.cpp, CUDA). Some 540 lines: one class whose forward and backward
// are meant to be read side by side; the backends' composite ops live with the backends
// (worker/backend*.cpp).
#pragma once

#include "worker/model/model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include "experiments/rng.h"
#include "kernels/ops.h"

namespace attnsweep {

namespace {

// Points each member of a struct of float* at consecutive slices of `base`; returns the
// total (call with base == nullptr to size the buffer first). null_empty: a member of
// size 0 is null (a buffer not allocated), not a pointer to the next one.
template <class Struct, size_t K>
int64_t carve(Struct& s, float* base, const int64_t (&sizes)[K], bool null_empty) {
  static_assert(sizeof(Struct) == K * sizeof(float*), "one size per member");
  float** ptrs = reinterpret_cast<float**>(&s);
  int64_t off = 0;
  for (size_t i = 0; i < K; ++i) {
    ptrs[i] = base && !(null_empty && sizes[i] == 0) ? base + off : nullptr;
    off += sizes[i];
  }
  return off;
}

// Allocates one zeroed buffer on the backend for all of `sizes` and carves it.
template <class Backend, class Array, class Struct, size_t K>
void allocate_carved(Backend& be, Array& mem, Struct& s, const int64_t (&sizes)[K], bool null_empty = false) {
  be.allocate(mem, carve(s, nullptr, sizes, null_empty));
  carve(s, mem.data(), sizes, null_empty);
}

// p + off, or null for a buffer not allocated.
float* at(float* p, int64_t off) {
  return p ? p + off : nullptr;
}

}  // namespace

template <ModelBackend Backend>
BasicModel<Backend>::BasicModel(const ModelConfig& cfg, int device) : be_(device), cfg_(cfg) {
  be_.set_precision(cfg.precision);
  tensors_ = parameter_layout(cfg);  // checks the config
  if (!Backend::kPadding && cfg.pad_id >= 0)
    throw std::runtime_error("model: padding (pad_id " + std::to_string(cfg.pad_id) +
                             ", the listops task) is not supported on this backend");
  decayed_ = decayed_floats(tensors_);
  int64_t sizes[kNumParameterTensors];
  for (int i = 0; i < kNumParameterTensors; ++i) sizes[i] = tensors_[static_cast<size_t>(i)].size;
  be_.bind();
  allocate_carved(be_, params_mem_, p_, sizes);
  allocate_carved(be_, grads_mem_, g_, sizes);
}

template <ModelBackend Backend>
void BasicModel<Backend>::get_params(float* host) {
  be_.download(host, params(), num_params());
}
template <ModelBackend Backend>
void BasicModel<Backend>::set_params(const float* host) {
  be_.upload(params(), host, num_params());
}
template <ModelBackend Backend>
void BasicModel<Backend>::get_grads(float* host) {
  be_.download(host, grads(), num_params());
}

template <ModelBackend Backend>
void BasicModel<Backend>::init(uint64_t init_seed, double init_std) {
  std::vector<float> host(static_cast<size_t>(num_params()));
  const int64_t C = cfg_.dim, F = cfg_.mlp_ratio * cfg_.dim;
  // fan_in of each tensor's nn.Linear (0: not a Linear)
  const int64_t fan_in[kNumParameterTensors] = {cfg_.in_dim, C, C, C, F, C, cfg_.in_dim, 0, 0, 0,
                                                0,           C, C, 0, 0, C, F,           0, 0, C};
  for (int i = 0; i < kNumParameterTensors; ++i) {
    const TensorInfo& t = tensors_[static_cast<size_t>(i)];
    float* w = host.data() + t.offset;
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
  set_params(host.data());
}

template <ModelBackend Backend>
LayerBuffers BasicModel<Backend>::layer_buffers(int64_t B) const {
  AttentionSpec spec;
  spec.act = cfg_.act;
  const int64_t T = cfg_.seq(), hd = cfg_.head_dim();
  return Backend::layer_buffers(spec, AttentionShape{B, cfg_.heads, T, T, hd, hd}, cfg_.mlp_ratio * cfg_.dim,
                                cfg_.pad_id >= 0);
}

template <ModelBackend Backend>
void BasicModel<Backend>::ensure_batch(int64_t B) {
  const LayerBuffers use = layer_buffers(B);
  // Grown for a larger batch, or when the path changes to one that needs more (the CPU's
  // paths depend on process-wide switches that tests flip: kernels/ops.h).
  if (B <= cap_B_ && have_.covers(use)) return;
  B = std::max(B, cap_B_);
  const BatchLayout plan = batch_layout(cfg_, B, use);
  be_.bind();
  be_.reserve(cfg_, B);  // the backend's own buffers for B rows (worker/model/device_memory.h)
  allocate_carved(be_, acts_mem_, a_, plan.acts, true);
  allocate_carved(be_, scratch_mem_, s_, plan.scratch, true);
  be_.allocate(norms_, plan.norms);
  cap_B_ = B;
  have_ = use;
}

template <ModelBackend Backend>
ForwardStats BasicModel<Backend>::forward(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                          bool collect_norms, const int64_t* idx) {
  stage_inputs(x, y_class, y_value, B, idx);
  return cfg_.head == Head::readout ? forward_readout(collect_norms) : forward_classify(collect_norms);
}

template <ModelBackend Backend>
ForwardStats BasicModel<Backend>::forward_backward(const float* x, const int32_t* y_class, const float* y_value,
                                                   int64_t B, bool collect_norms, const int64_t* idx) {
  stage_inputs(x, y_class, y_value, B, idx);  // once: a device-made batch is made once
  ForwardStats st;
  if (cfg_.head == Head::readout && readout_fused(true, collect_norms, st)) return st;
  st = cfg_.head == Head::readout ? forward_readout(collect_norms) : forward_classify(collect_norms);
  backward();
  return st;
}

template <ModelBackend Backend>
void BasicModel<Backend>::stage_inputs(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                       const int64_t* idx) {
  be_.bind();
  ensure_batch(B);
  B_ = B;
  const int64_t N = cfg_.tokens;
  const bool classify = cfg_.head == Head::classify;
  mask_ = nullptr;
  if (idx != nullptr && be_.fills_batches()) {
    if (cfg_.vocab > 0 || classify)
      throw std::logic_error("model: a batch made on the device is float features and float targets");
    std::tie(x_, y_value_) = be_.fill_batch(idx, B, B * N * cfg_.in_dim, B * cfg_.targets_per_sample());
    y_class_ = nullptr;
    return;
  }
  if (cfg_.vocab > 0) {
    ids_host_.resize(static_cast<size_t>(B * N));
    for (int64_t i = 0; i < B * N; ++i) {
      const float id = x[i];
      if (!(id >= 0 && id < static_cast<float>(cfg_.vocab)) || id != static_cast<float>(static_cast<int32_t>(id)))
        throw std::runtime_error("model: token id " + std::to_string(id) + " is not an integer in [0, " +
                                 std::to_string(cfg_.vocab) + ")");
      ids_host_[static_cast<size_t>(i)] = static_cast<int32_t>(id);
    }
    ids_ = be_.input(kInputIds, ids_host_.data(), B * N);
    build_key_mask();
    x_ = nullptr;
  } else {
    x_ = be_.input(kInputX, x, B * N * cfg_.in_dim);
  }
  y_class_ = classify ? be_.input(kInputYClass, y_class, B) : nullptr;
  y_value_ = classify ? nullptr : be_.input(kInputYValue, y_value, B * cfg_.targets_per_sample());
}

template <ModelBackend Backend>
void BasicModel<Backend>::backward() {
  be_.bind();
  be_.zero(grads(), num_params());
  if (cfg_.head == Head::readout)
    backward_readout();
  else
    backward_classify();
}

template <ModelBackend Backend>
const float* BasicModel<Backend>::host_predictions(std::vector<float>& buf) {
  const int64_t n = cfg_.head == Head::token_regress ? B_ * cfg_.tokens
                    : cfg_.head == Head::readout     ? B_
                                                     : B_ * cfg_.classes;
  return be_.host_view(a_.logits, n, buf);
}

template <ModelBackend Backend>
void BasicModel<Backend>::build_key_mask() {
  mask_ = nullptr;
  if (cfg_.pad_id < 0) return;
  const int64_t B = B_, N = cfg_.tokens, T = cfg_.seq(), off = cfg_.cls ? 1 : 0;
  key_mask_host_.resize(static_cast<size_t>(B * T));
  pad_key_mask(key_mask_host_.data(), ids_host_.data(), static_cast<int32_t>(cfg_.pad_id), B, T, N, off);
  mask_ = be_.input(kInputMask, key_mask_host_.data(), B * T);
}

// pred (B, N) = lnf (B, N, C) @ head_w^T + head_b; loss = mean over B N of (pred - y)^2.
template <ModelBackend Backend>
void BasicModel<Backend>::forward_token_head(ForwardStats& st) {
  const int64_t BN = B_ * cfg_.tokens;
  be_.matmul_forward(a_.logits, a_.lnf, p_.head_w, p_.head_b, BN, cfg_.dim, 1);
  st.loss = be_.mse_forward(a_.logits, y_value_, BN);
}

template <ModelBackend Backend>
void BasicModel<Backend>::backward_token_head() {
  const int64_t BN = B_ * cfg_.tokens, C = cfg_.dim;
  be_.zero(s_.dlogits, BN);
  be_.mse_backward(s_.dlogits, a_.logits, y_value_, 1.0f, BN);
  be_.zero(s_.dln, BN * C);
  be_.matmul_backward(s_.dln, g_.head_w, g_.head_b, s_.dlogits, a_.lnf, p_.head_w, BN, C, 1);
}

namespace {

// Mean over the batch of per-(b, h) norms (B, H) -> dst[l, h].
void add_norm_means(std::vector<double>& dst, const double* src, int64_t l, int64_t B, int64_t H) {
  for (int64_t h = 0; h < H; ++h) {
    double s = 0;
    for (int64_t b = 0; b < B; ++b) s += src[b * H + h];
    dst[static_cast<size_t>(l * H + h)] = s / static_cast<double>(B);
  }
}

// stats.attn_fro / jac_fro [L, H] from the kernels' per-(b, h) norms of every layer,
// norms (2, L, B, H) on the host.
void norm_means(ForwardStats& st, const double* norms, int64_t L, int64_t B, int64_t H) {
  st.attn_fro.assign(static_cast<size_t>(L * H), 0.0);
  st.jac_fro.assign(static_cast<size_t>(L * H), 0.0);
  for (int64_t l = 0; l < L; ++l) {
    add_norm_means(st.attn_fro, norms + l * B * H, l, B, H);
    add_norm_means(st.jac_fro, norms + (L + l) * B * H, l, B, H);
  }
}

}  // namespace

// The pointers of transformer layer l into the parameters, activations and gradients.
template <ModelBackend Backend>
LayerForwardArgs BasicModel<Backend>::layer_forward_args(int64_t l, double* attn_fro, double* jac_fro) {
  const int64_t C = cfg_.dim, F = cfg_.mlp_ratio * C, BT = B_ * cfg_.seq(), BTC = BT * C;
  LayerForwardArgs a{};
  a.inp = l == 0 ? a_.encoded : a_.res2 + (l - 1) * BTC;
  const LayerWeights w = layer_weights(p_, tensors_, l);
  a.ln1_w = w.ln1_w, a.ln1_b = w.ln1_b, a.qkv_w = w.qkv_w, a.qkv_b = w.qkv_b;
  a.proj_w = w.attproj_w, a.proj_b = w.attproj_b, a.ln2_w = w.ln2_w, a.ln2_b = w.ln2_b;
  a.fc_w = w.fc_w, a.fc_b = w.fc_b, a.fcproj_w = w.fcproj_w, a.fcproj_b = w.fcproj_b;
  a.ln1 = a_.ln1 + l * BTC, a.ln1_mean = a_.ln1_mean + l * BT, a.ln1_rstd = a_.ln1_rstd + l * BT;
  a.qkv = a_.qkv + l * 3 * BTC, a.atty = a_.atty_un + l * BTC, a.lse = a_.lse + l * cfg_.heads * BT;
  a.res1 = a_.res1 + l * BTC;
  a.ln2 = a_.ln2 + l * BTC, a.ln2_mean = a_.ln2_mean + l * BT, a.ln2_rstd = a_.ln2_rstd + l * BT;
  a.fch = a_.fch + l * BT * F, a.fch_gelu = at(a_.fch_gelu, l * BT * F), a.res2 = a_.res2 + l * BTC;
  a.attn_fro = attn_fro, a.jac_fro = jac_fro;
  return a;
}

template <ModelBackend Backend>
LayerBackwardArgs BasicModel<Backend>::layer_backward_args(int64_t l) {
  const LayerForwardArgs f = layer_forward_args(l, nullptr, nullptr);
  LayerBackwardArgs a{};
  a.inp = f.inp;
  a.ln1 = f.ln1, a.ln1_mean = f.ln1_mean, a.ln1_rstd = f.ln1_rstd;
  a.qkv = f.qkv, a.atty = f.atty, a.lse = f.lse, a.res1 = f.res1;
  a.ln2 = f.ln2, a.ln2_mean = f.ln2_mean, a.ln2_rstd = f.ln2_rstd;
  a.fch = f.fch, a.fch_gelu = f.fch_gelu;
  a.ln1_w = f.ln1_w, a.qkv_w = f.qkv_w, a.proj_w = f.proj_w;
  a.ln2_w = f.ln2_w, a.fc_w = f.fc_w, a.fcproj_w = f.fcproj_w;
  a.dres = s_.dres;
  const LayerWeights g = layer_weights(g_, tensors_, l);
  a.g_ln1_w = g.ln1_w, a.g_ln1_b = g.ln1_b, a.g_qkv_w = g.qkv_w, a.g_qkv_b = g.qkv_b;
  a.g_proj_w = g.attproj_w, a.g_proj_b = g.attproj_b, a.g_ln2_w = g.ln2_w, a.g_ln2_b = g.ln2_b;
  a.g_fc_w = g.fc_w, a.g_fc_b = g.fc_b, a.g_fcproj_w = g.fcproj_w, a.g_fcproj_b = g.fcproj_b;
  return a;
}

// Layer l's split-heads q, k, v and attention output (null where not allocated).
template <ModelBackend Backend>
HeadBuffers BasicModel<Backend>::heads(int64_t l) const {
  const int64_t BTC = B_ * cfg_.seq() * cfg_.dim;
  return {at(a_.q, l * BTC), at(a_.k, l * BTC), at(a_.v, l * BTC), at(a_.atty, l * BTC)};
}

template <ModelBackend Backend>
ForwardStats BasicModel<Backend>::forward_classify(bool collect_norms) {
  const int64_t B = B_, C = cfg_.dim, L = cfg_.layers, T = cfg_.seq(), N = cfg_.tokens, H = cfg_.heads,
                hd = cfg_.head_dim(), K = cfg_.classes, F = cfg_.mlp_ratio * C, off = cfg_.cls ? 1 : 0;
  const int64_t BT = B * T, BTC = BT * C, BH = B * H;
  ForwardStats st;
  // embedding: encoded[b, t] = (CLS | x[b, t - off] @ patch_w^T + patch_b | wte[id]) + wpe[t]
  if (cfg_.vocab > 0)
    be_.embedding_forward(a_.emb, ids_, p_.patch_w, nullptr, B, N, C);
  else
    be_.matmul_forward(a_.emb, x_, p_.patch_w, p_.patch_b, B * N, cfg_.in_dim, C);
  be_.tokens_forward(a_.encoded, a_.emb, p_.cls, p_.wpe, B, T, N, C, off);
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = collect_norms;
  const AttentionShape shape{B, H, T, T, hd, hd};
  double* norms = norms_.data();
  for (int64_t l = 0; l < L; ++l) {
    const LayerForwardArgs a = layer_forward_args(l, norms + l * BH, norms + (L + l) * BH);
    // CPU: the whole layer per block of samples while they are in cache (kernels/ops.h;
    // the same values as the op sequence below), where it can.
    if (be_.layer_forward_fused(spec, shape, F, mask_, a)) continue;
    be_.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.inp, a.ln1_w, a.ln1_b, BT, C);
    be_.matmul_forward(a.qkv, a.ln1, a.qkv_w, a.qkv_b, BT, C, 3 * C);
    // The output as rows of atty_un (CPU: Q, K, V read in place from qkv where it can).
    be_.attention_block_forward(spec, shape, mask_, a.qkv, heads(l), a.atty, a.lse, a.attn_fro, a.jac_fro);
    // attproj goes straight into res1 and the residual is added (CPU: row block by row
    // block as the GEMM finishes them; a device backend adds it in place after).
    be_.matmul_residual_forward(a.res1, a.atty, a.proj_w, a.proj_b, a.inp, BT, C, C);
    be_.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res1, a.ln2_w, a.ln2_b, BT, C);
    // The MLP's GELU fused with its matmul on the CPU (kernels/ops.h: the same values as
    // the two ops, tested in test_gemm.cpp); two ops on a device backend.
    be_.matmul_gelu_forward(a.fch, a.fch_gelu, a.ln2, a.fc_w, a.fc_b, BT, C, F);
    be_.matmul_residual_forward(a.res2, a.fch_gelu, a.fcproj_w, a.fcproj_b, a.res1, BT, F, C);
  }
  be_.layernorm_forward(a_.lnf, a_.lnf_mean, a_.lnf_rstd, a_.res2 + (L - 1) * BTC, p_.lnf_w, p_.lnf_b, BT, C);
  if (cfg_.head == Head::token_regress) {
    forward_token_head(st);
    if (collect_norms) norm_means(st, be_.to_host(norms, 2 * L * BH), L, B, H);
    return st;
  }
  if (cfg_.cls)
    be_.cls_pool_forward(a_.pooled, a_.lnf, B, T, C);
  else if (mask_ != nullptr)
    be_.masked_meanpool_forward(a_.pooled, a_.lnf, mask_, B, T, C);
  else
    be_.meanpool_forward(a_.pooled, a_.lnf, B, T, C);
  be_.matmul_forward(a_.logits, a_.pooled, p_.head_w, p_.head_b, B, C, K);
  st.loss = be_.softmax_crossentropy_forward(a_.probs, &st.correct, a_.logits, y_class_, B, K);
  if (collect_norms) norm_means(st, be_.to_host(norms, 2 * L * BH), L, B, H);
  return st;
}

template <ModelBackend Backend>
void BasicModel<Backend>::backward_classify() {
  const int64_t B = B_, C = cfg_.dim, L = cfg_.layers, T = cfg_.seq(), N = cfg_.tokens, H = cfg_.heads,
                hd = cfg_.head_dim(), K = cfg_.classes, F = cfg_.mlp_ratio * C, off = cfg_.cls ? 1 : 0;
  const int64_t BT = B * T, BTC = BT * C;
  if (cfg_.head == Head::token_regress) {
    backward_token_head();  // fills s_.dln
  } else {
    be_.zero(s_.dlogits, B * K);
    be_.softmax_crossentropy_backward(s_.dlogits, a_.probs, y_class_, 1.0f, B, K);
    be_.zero(s_.dpooled, B * C);
    be_.matmul_backward(s_.dpooled, g_.head_w, g_.head_b, s_.dlogits, a_.pooled, p_.head_w, B, C, K);
    be_.zero(s_.dln, BTC);
    if (cfg_.cls)
      be_.cls_pool_backward(s_.dln, s_.dpooled, B, T, C);
    else if (mask_ != nullptr)
      be_.masked_meanpool_backward(s_.dln, s_.dpooled, mask_, B, T, C);
    else
      be_.meanpool_backward(s_.dln, s_.dpooled, B, T, C);
  }
  be_.zero(s_.dres, BTC);
  be_.layernorm_backward(s_.dres, g_.lnf_w, g_.lnf_b, s_.dln, a_.res2 + (L - 1) * BTC, p_.lnf_w, a_.lnf_mean,
                         a_.lnf_rstd, BT, C);
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = false;
  const AttentionShape shape{B, H, T, T, hd, hd};
  const HeadBuffers dheads{s_.dq, s_.dk, s_.dv, s_.datty};
  for (int64_t l = L - 1; l >= 0; --l) {
    const LayerBackwardArgs a = layer_backward_args(l);
    // CPU: the layer's backward per block of samples (kernels/ops.h), as the forward.
    if (be_.layer_backward_fused(spec, shape, F, mask_, a)) continue;
    // dres holds d loss / d res2[l]; res2 = res1 + fcproj, so it is also d/d fcproj and
    // (after the MLP's contribution is added) d/d res1.
    // dbig = d/d fch (through fcproj and the GELU): fused on the CPU, as in the forward.
    be_.gelu_matmul_backward(s_.dbig, s_.dbig2, a.g_fcproj_w, a.g_fcproj_b, s_.dres, a.fch_gelu, a.fch, a.fcproj_w, BT,
                             F, C);
    be_.matmul_backward_overwrite(s_.dln, a.g_fc_w, a.g_fc_b, s_.dbig, a.ln2, a.fc_w, BT, C, F);
    be_.layernorm_backward(s_.dres, a.g_ln2_w, a.g_ln2_b, s_.dln, a.res1, a.ln2_w, a.ln2_mean, a.ln2_rstd, BT, C);
    // dres = d/d res1 = d/d attproj (and the residual path to inp).
    be_.matmul_backward_overwrite(s_.dln, a.g_proj_w, a.g_proj_b, s_.dres, a.atty, a.proj_w, BT, C, C);
    // dO is s_.dln (rows); dQ, dK, dV land in dqkv.
    be_.attention_block_backward(spec, shape, mask_, a.qkv, heads(l), a.atty, a.lse, s_.dln, dheads, s_.dqkv);
    be_.matmul_backward_overwrite(s_.dln, a.g_qkv_w, a.g_qkv_b, s_.dqkv, a.ln1, a.qkv_w, BT, C, 3 * C);
    be_.layernorm_backward(s_.dres, a.g_ln1_w, a.g_ln1_b, s_.dln, a.inp, a.ln1_w, a.ln1_mean, a.ln1_rstd, BT, C);
  }
  // dres = d/d encoded: positions and CLS sum over the batch, the patch tokens go back
  // through the embedding.
  be_.tokens_backward(g_.wpe, g_.cls, s_.demb, s_.dres, B, T, N, C, off);
  if (cfg_.vocab > 0)
    be_.embedding_backward(g_.patch_w, nullptr, s_.demb, ids_, B, N, C);
  else
    be_.matmul_backward(nullptr, g_.patch_w, g_.patch_b, s_.demb, x_, p_.patch_w, B * N, cfg_.in_dim, C);
}

template <ModelBackend Backend>
ReadoutCell BasicModel<Backend>::readout_cell(bool train) {
  ReadoutCell cell;
  cell.qkv_w = p_.qkv_w;
  cell.act = cfg_.act;
  cell.pred = a_.logits;
  cell.grad = train ? g_.qkv_w : nullptr;
  cell.attn_fro = norms_.data();
  cell.jac_fro = norms_.data() + B_ * cfg_.heads;
  return cell;
}

template <ModelBackend Backend>
ReadoutCell BasicModel<Backend>::readout_begin(const float* x, const float* y_value, int64_t B, bool train,
                                               const int64_t* idx) {
  if (cfg_.head != Head::readout) throw std::logic_error("readout_begin: not a read-out model");
  stage_inputs(x, nullptr, y_value, B, idx);
  if (train) be_.zero(grads(), num_params());
  return readout_cell(train);
}

template <ModelBackend Backend>
ReadoutCell BasicModel<Backend>::readout_join(int64_t B, bool train) {
  if (cfg_.head != Head::readout) throw std::logic_error("readout_join: not a read-out model");
  be_.bind();
  ensure_batch(B);
  B_ = B;
  if (train) be_.zero(grads(), num_params());
  return readout_cell(train);
}

template <ModelBackend Backend>
bool BasicModel<Backend>::readout_together(const std::vector<BasicModel*>& models, std::vector<ReadoutCell>& cells,
                                           bool collect_norms) {
  BasicModel& first = *models.at(0);
  for (const BasicModel* m : models)
    if (m->cfg_.tokens != first.cfg_.tokens || m->cfg_.dim != first.cfg_.dim || m->cfg_.heads != first.cfg_.heads ||
        m->B_ != first.B_)
      throw std::logic_error("readout_together: models of another shape or batch");
  std::vector<Backend*> backends;
  for (BasicModel* m : models) backends.push_back(&m->be_);
  first.be_.bind();
  return first.be_.readout_together(backends,
                                    ReadoutShape{first.B_, first.cfg_.tokens, first.cfg_.dim, first.cfg_.heads},
                                    first.x_, first.y_value_, cells, collect_norms);
}

template <ModelBackend Backend>
ForwardStats BasicModel<Backend>::readout_end(const ReadoutCell& cell, bool collect_norms) {
  ForwardStats st;
  st.loss = cell.loss;
  if (collect_norms) norm_means(st, be_.to_host(norms_.data(), 2 * B_ * cfg_.heads), 1, B_, cfg_.heads);
  return st;
}

template <ModelBackend Backend>
bool BasicModel<Backend>::readout_fused(bool train, bool collect_norms, ForwardStats& st) {
  ReadoutCell cell = readout_cell(train);
  if (!be_.readout_fused(ReadoutShape{B_, cfg_.tokens, cfg_.dim, cfg_.heads}, x_, y_value_, cell, train, collect_norms))
    return false;
  st = readout_end(cell, collect_norms);
  return true;
}

template <ModelBackend Backend>
ForwardStats BasicModel<Backend>::forward_readout(bool collect_norms) {
  const int64_t B = B_, C = cfg_.dim, N = cfg_.tokens, H = cfg_.heads, hd = cfg_.head_dim(), Lp = N - 1;
  ForwardStats st;
  if (readout_fused(false, collect_norms, st)) return st;
  // qkv of every token (the query's K, V and the prompt's Q are not used: cheap here).
  be_.matmul_forward(a_.qkv, x_, p_.qkv_w, nullptr, B * N, C, 3 * C);
  be_.readout_split(a_.q, a_.k, a_.v, a_.qkv, B, N, H, hd);
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = collect_norms;
  const AttentionShape shape{B, H, 1, Lp, hd, hd};
  double* norms = norms_.data();
  be_.attention_forward(spec, shape, a_.q, a_.k, a_.v, nullptr, a_.atty, a_.lse, norms, norms + B * H);
  // prediction = last coordinate of the query's output = head H-1's last coordinate
  be_.readout_pick(a_.logits, a_.atty, B, H, hd);
  st.loss = be_.mse_forward(a_.logits, y_value_, B);
  if (collect_norms) norm_means(st, be_.to_host(norms, 2 * B * H), 1, B, H);
  return st;
}

template <ModelBackend Backend>
void BasicModel<Backend>::backward_readout() {
  const int64_t B = B_, C = cfg_.dim, N = cfg_.tokens, H = cfg_.heads, hd = cfg_.head_dim(), Lp = N - 1;
  ForwardStats unused;  // the forward again, with the backward in the same pass
  if (readout_fused(true, false, unused)) return;
  be_.zero(s_.dlogits, B);
  be_.mse_backward(s_.dlogits, a_.logits, y_value_, 1.0f, B);
  be_.zero(s_.datty, B * H * hd);
  be_.readout_pick_backward(s_.datty, s_.dlogits, B, H, hd);
  AttentionSpec spec;
  spec.act = cfg_.act;
  spec.collect_norms = false;
  const AttentionShape shape{B, H, 1, Lp, hd, hd};
  be_.attention_backward(spec, shape, a_.q, a_.k, a_.v, nullptr, a_.atty, s_.datty, a_.lse, s_.dq, s_.dk, s_.dv);
  be_.zero(s_.dqkv, B * N * 3 * C);
  be_.readout_merge(s_.dqkv, s_.dq, s_.dk, s_.dv, B, N, H, hd);
  be_.matmul_backward(nullptr, g_.qkv_w, nullptr, s_.dqkv, x_, p_.qkv_w, B * N, C, 3 * C);
}

}  // namespace attnsweep
