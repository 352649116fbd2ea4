// The model's plan (worker/model/model_layout.h): the parameter table and the batch buffers.
#include "worker/model/model_layout.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <stdexcept>
#include <string>

#include "base/errors.h"
#include "experiments/params.h"

namespace attnsweep {

ModelConfig model_config_of(const nlohmann::json& c, const DataShape& data) {
  ModelConfig mc;
  if (data.classes > 0)
    mc.head = Head::classify;
  else if (data.targets_per_sample == 1)
    mc.head = Head::readout;
  else if (data.targets_per_sample == data.tokens)
    mc.head = Head::token_regress;
  else
    throw InternalError("training data: targets_per_sample " + std::to_string(data.targets_per_sample) +
                        " is neither 1 nor the token count " + std::to_string(data.tokens));
  mc.pad_id = data.pad_id;
  mc.tokens = data.tokens;
  mc.in_dim = data.in_dim;
  mc.classes = data.classes;
  mc.vocab = data.vocab;
  mc.dim = c.at("dim").get<int64_t>();
  mc.layers = c.at("layers").get<int64_t>();
  mc.heads = c.at("heads").get<int64_t>();
  // The read-out (paper B) has no MLP and pools nothing; pde predicts every token.
  if (mc.head != Head::readout) mc.mlp_ratio = c.at("mlp_ratio").get<int64_t>();
  mc.cls = c.contains("cls") && c.at("cls").get<bool>();
  mc.act = activation_spec_of(c);
  // Absent at its default (fp32): experiments/training_keys.cpp omits it from the config.
  if (c.contains("precision")) mc.precision = parse_precision(c.at("precision").get<std::string>());
  return mc;
}

std::vector<TensorInfo> parameter_layout(const ModelConfig& cfg) {
  if (cfg.dim <= 0 || cfg.heads <= 0 || cfg.dim % cfg.heads != 0)
    throw InputError({"model: heads " + std::to_string(cfg.heads) + " must divide dim " + std::to_string(cfg.dim)});
  const int64_t C = cfg.dim, L = cfg.layers, T = cfg.seq(), in = cfg.in_dim, F = cfg.mlp_ratio * cfg.dim;
  int64_t K = cfg.classes;
  const bool tf = cfg.head != Head::readout;  // the transformer (classify, token_regress)
  if (cfg.head == Head::token_regress) {
    if (cfg.cls) throw InputError({"token_regress model: predicts every token; no CLS token"});
    if (cfg.pad_id >= 0) throw InputError({"token_regress model: no padding mask (pad_id must be -1)"});
    K = 1;  // one value per token
  }
  if (cfg.pad_id >= 0 && (cfg.vocab <= 0 || cfg.pad_id >= cfg.vocab))
    throw InputError({"model: pad_id " + std::to_string(cfg.pad_id) + " needs token ids (vocab " +
                      std::to_string(cfg.vocab) + " > pad_id)"});
  if (!tf) {
    if (cfg.in_dim != cfg.dim) throw InputError({"readout model: in_dim must equal dim (no embedding)"});
    if (cfg.layers != 1) throw InputError({"readout model: one attention layer"});
    if (cfg.tokens < 2) throw InputError({"readout model: needs at least one prompt token and the query"});
  }
  struct Row {
    const char* name;
    std::vector<int64_t> shape;
  };
  // Buffer order = ParameterTensors order; a readout model has only qkv_w.
  const Row rows[kNumParameterTensors] = {
      {cfg.vocab > 0 ? "wte" : "patch_w", !tf             ? std::vector<int64_t>{0}
                                          : cfg.vocab > 0 ? std::vector<int64_t>{cfg.vocab, C}
                                                          : std::vector<int64_t>{C, in}},
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
  std::vector<TensorInfo> tensors;
  int64_t off = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    TensorInfo t;
    t.name = rows[i].name;
    t.shape = rows[i].shape;
    t.size = 1;
    for (int64_t d : t.shape) t.size *= d;
    t.offset = off;
    off += t.size;
    tensors.push_back(std::move(t));
  }
  return tensors;
}

LayerWeights layer_weights(const ParameterTensors& t, const std::vector<TensorInfo>& layout, int64_t l) {
  // Member i of ParameterTensors is tensor i of the layout: one buffer order.
  auto slice = [&](float* base, size_t member_offset) {
    const TensorInfo& ti = layout[member_offset / sizeof(float*)];
    return base + l * (ti.size / ti.shape[0]);
  };
#define ATTNSWEEP_LAYER_SLICE(m) slice(t.m, offsetof(ParameterTensors, m))
  return {ATTNSWEEP_LAYER_SLICE(ln1_w), ATTNSWEEP_LAYER_SLICE(ln1_b),     ATTNSWEEP_LAYER_SLICE(qkv_w),
          ATTNSWEEP_LAYER_SLICE(qkv_b), ATTNSWEEP_LAYER_SLICE(attproj_w), ATTNSWEEP_LAYER_SLICE(attproj_b),
          ATTNSWEEP_LAYER_SLICE(ln2_w), ATTNSWEEP_LAYER_SLICE(ln2_b),     ATTNSWEEP_LAYER_SLICE(fc_w),
          ATTNSWEEP_LAYER_SLICE(fc_b),  ATTNSWEEP_LAYER_SLICE(fcproj_w),  ATTNSWEEP_LAYER_SLICE(fcproj_b)};
#undef ATTNSWEEP_LAYER_SLICE
}

int64_t parameter_floats(const std::vector<TensorInfo>& tensors) {
  const TensorInfo& last = tensors.back();
  return last.offset + last.size;
}

int64_t decayed_floats(const std::vector<TensorInfo>& tensors) {
  const TensorInfo& last = tensors.at(kNumDecayedTensors - 1);
  return last.offset + last.size;
}

int64_t BatchLayout::floats() const {
  return std::accumulate(std::begin(acts), std::end(acts), int64_t{0}) +
         std::accumulate(std::begin(scratch), std::end(scratch), int64_t{0});
}

BatchLayout batch_layout(const ModelConfig& cfg, int64_t B, const LayerBuffers& use) {
  const int64_t C = cfg.dim, L = cfg.layers, T = cfg.seq(), N = cfg.tokens, H = cfg.heads, K = cfg.classes,
                F = cfg.mlp_ratio * cfg.dim;
  const int64_t BT = B * T, BTC = BT * C, LBTC = L * BTC, LBT = L * BT, BTF = BT * F;
  const int64_t BK = cfg.head == Head::token_regress ? B * N : B * std::max<int64_t>(K, 1);
  // The buffers this model's path uses: tf the transformer's (not the readout head's),
  // heads the split heads (the readout head's attention always takes them).
  const bool tf = cfg.head != Head::readout, classify = cfg.head == Head::classify;
  const bool heads = !tf || use.split_heads;
  const auto when = [](bool used, int64_t n) { return used ? n : int64_t{0}; };
  // One size per member, in member order (0: not allocated).
  const int64_t acts[] = {
      when(tf, B * N * C),                // emb
      when(tf, BTC),                      // encoded
      when(tf, LBTC),                     // ln1
      when(tf, LBT),                      // ln1_mean
      when(tf, LBT),                      // ln1_rstd
      3 * LBTC,                           // qkv
      when(heads, LBTC),                  // q
      when(heads, LBTC),                  // k
      when(heads, LBTC),                  // v
      when(heads, LBTC),                  // atty
      L * B * H * T,                      // lse
      when(tf, LBTC),                     // atty_un
      when(tf, LBTC),                     // res1
      when(tf, LBTC),                     // ln2
      when(tf, LBT),                      // ln2_mean
      when(tf, LBT),                      // ln2_rstd
      when(tf, L * BTF),                  // fch
      when(tf && use.gelu_out, L * BTF),  // fch_gelu
      when(tf, LBTC),                     // res2
      when(tf, BTC),                      // lnf
      when(tf, BT),                       // lnf_mean
      when(tf, BT),                       // lnf_rstd
      when(classify, B * C),              // pooled
      BK,                                 // logits
      when(classify, BK),                 // probs
  };
  const int64_t scratch[] = {
      when(tf, BTC),                       // dres
      when(tf, BTC),                       // dln
      when(tf && use.op_grads, BTF),       // dbig
      when(tf && use.gelu_grad, BTF),      // dbig2
      when(!tf || use.op_grads, 3 * BTC),  // dqkv
      when(heads, BTC),                    // dq
      when(heads, BTC),                    // dk
      when(heads, BTC),                    // dv
      when(heads, BTC),                    // datty
      when(classify, B * C),               // dpooled
      BK,                                  // dlogits
      when(tf, B * N * C),                 // demb
  };
  static_assert(std::size(acts) == kNumActs && std::size(scratch) == kNumScratch, "one size per member");
  BatchLayout out;
  std::copy(std::begin(acts), std::end(acts), out.acts);
  std::copy(std::begin(scratch), std::end(scratch), out.scratch);
  out.norms = 2 * L * B * H;
  return out;
}

}  // namespace attnsweep
