// The model as a declared plan: its config, its parameter tensors and every buffer of
// activations and scratch, each with its size, as pure functions of the config (and of
// the batch and the buffers the backend's path uses). The model allocates what they say
// (worker/model/model_impl.h), the GPU memory estimate sums them (worker/model/gpu_memory.h), and the
// checkpoint's parameter count is theirs: a buffer is declared here once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/task.h"  // DataShape
#include "kernels/activation.h"
#include "kernels/precision.h"
#include "worker/model/backend.h"  // LayerBuffers

namespace attnsweep {

enum class Head { classify, readout, token_regress };

struct ModelConfig {
  Head head = Head::classify;
  int64_t tokens = 16;  // N input tokens per sample (readout: prompt + 1 query)
  int64_t in_dim = 16;  // features per input token (1 when vocab > 0)
  int64_t vocab = 0;    // > 0: inputs are token ids in [0, vocab), embedded by a table
  int64_t dim = 64;     // C
  int64_t layers = 4;   // L (readout: 1)
  int64_t heads = 4;    // H; head width dim / heads
  int64_t mlp_ratio = 4;
  int64_t classes = 10;  // classify only
  bool cls = false;      // classify from a CLS token instead of the mean over tokens
  int64_t pad_id = -1;   // vocab > 0: the id of padding tokens, masked out of attention (-1: none)
  ActivationSpec act;
  Precision precision = Precision::fp32;  // of the GEMMs and attention (kernels/precision.h)

  int64_t seq() const { return tokens + (cls ? 1 : 0); }  // T: the sequence the blocks see
  int64_t head_dim() const { return dim / heads; }
  // Floats of y_value per sample: token_regress one per token, readout one.
  int64_t targets_per_sample() const { return head == Head::token_regress ? tokens : 1; }
};

// Parameter tensors. The weight matrices (decayed by AdamW) come first so that the
// decayed part of every buffer is one contiguous prefix (see decayed_count()).
// Per-block tensors are stacked over layers, [L, ...], as in llm.c.
struct ParameterTensors {
  // decayed
  float* patch_w;    // (C, in_dim); with vocab > 0 the token table "wte" (vocab, C)
  float* qkv_w;      // (L, 3C, C): rows [0,C) Q, [C,2C) K, [2C,3C) V
  float* attproj_w;  // (L, C, C)
  float* fc_w;       // (L, 4C, C)
  float* fcproj_w;   // (L, C, 4C)
  float* head_w;     // (classes, C); token_regress (1, C)
  // not decayed
  float* patch_b;    // (C); empty with vocab > 0
  float* wpe;        // (T, C)
  float* cls;        // (C)
  float* ln1_w;      // (L, C)
  float* ln1_b;      // (L, C)
  float* qkv_b;      // (L, 3C)
  float* attproj_b;  // (L, C)
  float* ln2_w;      // (L, C)
  float* ln2_b;      // (L, C)
  float* fc_b;       // (L, 4C)
  float* fcproj_b;   // (L, C)
  float* lnf_w;      // (C)
  float* lnf_b;      // (C)
  float* head_b;     // (classes); token_regress (1)
};
constexpr int kNumParameterTensors = 20;
constexpr int kNumDecayedTensors = 6;

// Layer l's slice of each per-layer tensor of a ParameterTensors (the parameters, or
// their gradients: one layout): the tensor's (L, ...) buffer plus l times the floats of
// one layer, from its shape in parameter_layout.
struct LayerWeights {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *attproj_w, *attproj_b, *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

// One parameter tensor by name (for dumps, tests and the PyTorch comparison).
struct TensorInfo {
  std::string name;            // "qkv_w"
  std::vector<int64_t> shape;  // {L, 3C, C}
  int64_t offset = 0;          // into the parameter buffer
  int64_t size = 0;
};

// Activations of the last forward, one buffer (llm.c), members in allocation order. A
// member the model's path does not use is not allocated (size 0, null): the transformer's
// with the readout head, and those layer_buffers leaves out (marked with the LayerBuffers
// flag that keeps them in a transformer; the readout head always uses the split heads
// and dqkv).
struct ModelActs {
  float* emb;       // (B, N, C) patch embedding before positions
  float* encoded;   // (B, T, C) block input of layer 0
  float* ln1;       // (L, B, T, C)
  float* ln1_mean;  // (L, B, T)
  float* ln1_rstd;  // (L, B, T)
  float* qkv;       // (L, B, T, 3C)
  float* q;         // (L, B, H, T, hd)   readout: (B, H, 1, hd)   split_heads
  float* k;         // (L, B, H, T, hd)   split_heads
  float* v;         // (L, B, H, T, hd)   split_heads
  float* atty;      // (L, B, H, T, hd)   split_heads
  float* lse;       // (L, B, H, T)
  float* atty_un;   // (L, B, T, C)   heads side by side again
  float* res1;      // (L, B, T, C)
  float* ln2;       // (L, B, T, C)
  float* ln2_mean;  // (L, B, T)
  float* ln2_rstd;  // (L, B, T)
  float* fch;       // (L, B, T, 4C)
  float* fch_gelu;  // (L, B, T, 4C)   gelu_out
  float* res2;      // (L, B, T, C)   block output
  float* lnf;       // (B, T, C)
  float* lnf_mean;  // (B, T)
  float* lnf_rstd;  // (B, T)
  float* pooled;    // (B, C)   classify only
  float* logits;    // (B, classes)   readout: pred (B); token_regress: pred (B, N)
  float* probs;     // (B, classes)   classify only
};

// The backward's scratch, one buffer, members in allocation order (as ModelActs).
struct ModelScratch {
  float* dres;   // (B, T, C) gradient of the residual stream
  float* dln;    // (B, T, C)
  float* dbig;   // (B, T, 4C)   op_grads
  float* dbig2;  // (B, T, 4C)   gelu_grad
  float* dqkv;   // (B, T, 3C)   op_grads (readout: always)
  float* dq;     // (B, H, T, hd)   split_heads
  float* dk;
  float* dv;
  float* datty;    // (B, H, T, hd)   split_heads
  float* dpooled;  // (B, C)   classify only
  float* dlogits;  // (B, classes)   token_regress: (B, N)
  float* demb;     // (B, N, C)
};
constexpr size_t kNumActs = sizeof(ModelActs) / sizeof(float*);
constexpr size_t kNumScratch = sizeof(ModelScratch) / sizeof(float*);

// The model of a cell config (its dim, layers, heads, mlp_ratio, cls, activation and
// precision keys) for a task's data (classes == 0: the regression read-out).
ModelConfig model_config_of(const nlohmann::json& config, const DataShape& data);

// The parameter tensors of `cfg`, in ParameterTensors order, with offsets into one buffer;
// a tensor the model does not have has size 0 (a readout model has only qkv_w). Throws
// std::runtime_error for a config no model can be built from, naming the key.
std::vector<TensorInfo> parameter_layout(const ModelConfig& cfg);
// `layout` is parameter_layout's (tensor i is member i of ParameterTensors); l < L.
LayerWeights layer_weights(const ParameterTensors& t, const std::vector<TensorInfo>& layout, int64_t l);
// The floats of the whole parameter buffer (the model's num_params()).
int64_t parameter_floats(const std::vector<TensorInfo>& tensors);
// The floats of the decayed prefix (the first kNumDecayedTensors tensors).
int64_t decayed_floats(const std::vector<TensorInfo>& tensors);

// The batch buffers at B rows when the backend's path uses `use`: floats per member of
// ModelActs and ModelScratch (0: not allocated), and the doubles of the norms (2, L, B, H).
struct BatchLayout {
  int64_t acts[kNumActs] = {};
  int64_t scratch[kNumScratch] = {};
  int64_t norms = 0;
  int64_t floats() const;  // acts and scratch
};
BatchLayout batch_layout(const ModelConfig& cfg, int64_t B, const LayerBuffers& use);

}  // namespace attnsweep
