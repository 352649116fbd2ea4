// The model the trainer trains, llm.c style: parameters, gradients and activations each
// live in one contiguous buffer seen through a struct of pointers, the forward is a list
// of ops (kernels/ops.h, kernels/model_ops.h) and the backward is written by hand, in
// reverse. The sequence is written once, as a template over a backend (worker/model/backend.h:
// the concept ModelBackend; CPU, or CUDA in worker/model/backend_cuda.h) that owns the buffers
// and runs each op; where the CPU fuses ops the backend runs a composite op.
//
// The shapes (docs/architecture.md, "Trainer"):
// - Head::classify, a pre-LN transformer: x [B, N, in_dim] -> linear patch embedding
//   (or, with vocab > 0, token ids x [B, N] -> an embedding table) + learned positions (+ an optional CLS token in
//   front), L blocks of (LN -> multi-head attention with phi, Q/K/V/O projections -> residual -> LN -> MLP(GELU,
//   mlp_ratio) -> residual), final LN, mean over tokens (or the CLS token) -> linear head -> softmax cross-entropy.
// - Head::readout, paper B's in-context regression model (science.md): one attention
//   layer on the raw tokens (in_dim == dim), no embedding, LN, MLP, residual or bias;
//   the last token is the query, the other N - 1 are the keys and values, and the
//   prediction is the last coordinate of the query's output; MSE loss.
// - Head::token_regress, per-token regression (the pde task): the classify transformer
//   without pooling (and without CLS); after the final LN a linear map C -> 1 per token
//   gives pred [B, N]; MSE over all B N values. y_value is [B, N].
//
// Padding (classify with vocab > 0 and pad_id >= 0, the listops task): tokens whose id
// is pad_id are hidden from every attention row by a key mask [B, T] (1 = attend; the
// CLS token is always attended), so the kernels' n_i counts real tokens only, and the
// mean pool averages over the real tokens. With padding only at the end, the loss of a
// sample does not depend on how much padding follows it; nor do attn_fro / jac_fro,
// which count the rows of real queries only (padding rows never reach the loss).
// Both backends pad: the norms of the real query rows are a per-sample gather and a
// second attention call on logged steps (kernels/real_query_norms.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/precision.h"
#include "worker/model/backend.h"
#include "worker/model/model_layout.h"

namespace attnsweep {

// What one forward pass measured.
struct ForwardStats {
  double loss = 0;
  int64_t correct = 0;           // classify: rows whose argmax is the label
  std::vector<double> attn_fro;  // [L, H], mean over the batch (when norms were asked)
  std::vector<double> jac_fro;   // [L, H]
};

// The model on one device of a backend (worker/model/backend.h): Model on the CPU,
// CudaModel (worker/model/backend_cuda.h) on a GPU. The forward and backward below are one
// sequence of backend ops for both. Pointers returned by params(), grads(), p(), g() are
// on the backend's device (host memory for the CPU); get_params / set_params copy.
template <ModelBackend Backend>
class BasicModel {
 public:
  using BackendType = Backend;
  // device: the GPU of a CUDA model (ignored on the CPU).
  explicit BasicModel(const ModelConfig& cfg, int device = 0);
  BasicModel(const BasicModel&) = delete;
  BasicModel& operator=(const BasicModel&) = delete;

  const ModelConfig& config() const { return cfg_; }
  int64_t num_params() const { return parameter_floats(tensors_); }
  int64_t decayed_count() const { return decayed_; }  // params [0, decayed_count) are decayed
  float* params() { return params_mem_.data(); }
  float* grads() { return grads_mem_.data(); }
  const float* params() const { return params_mem_.data(); }
  const float* grads() const { return grads_mem_.data(); }
  const ParameterTensors& p() const { return p_; }
  const ParameterTensors& g() const { return g_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  Backend& backend() { return be_; }

  // Host copies of the parameter / gradient buffers (num_params() floats).
  void get_params(float* host);
  void set_params(const float* host);
  void get_grads(float* host);

  // PyTorch's defaults: nn.Linear weights and biases uniform(+-1/sqrt(fan_in)), LayerNorm
  // weight 1 and bias 0, positions and CLS N(0, 0.02^2). init_std > 0: weight matrices
  // N(0, init_std^2) and biases 0 instead. Draws depend only on init_seed and the shapes
  // (drawn on the host, so every backend starts from the same bits).
  void init(uint64_t init_seed, double init_std);

  // Buffers for batches of up to B rows now (forward grows them on demand otherwise).
  void reserve(int64_t B) { ensure_batch(B); }
  // Floats allocated now in the parameter, gradient, activation and scratch buffers, and
  // doubles in the norms' (what worker/model/model_layout.h declares; for the tests).
  int64_t buffer_floats() const {
    return static_cast<int64_t>(params_mem_.size() + grads_mem_.size() + acts_mem_.size() + scratch_mem_.size());
  }
  int64_t norm_doubles() const { return static_cast<int64_t>(norms_.size()); }
  // The per-layer buffers allocated now (LayerBuffers of the backend's path).
  LayerBuffers buffers_in_use() const { return have_; }

  // Forward over a batch of B rows (buffers grow as needed). Host inputs:
  // x [B, N, in_dim] (vocab > 0: token ids as floats, [B, N]; one input type for every
  // task, and ids below 2^24 are exact); classify: y_class [B]; readout: y_value [B];
  // token_regress: y_value [B, N]. Saves what the backward needs (a device backend keeps
  // its own copy of the inputs). collect_norms fills stats.attn_fro / jac_fro.
  // idx (may be null): the rows' sample indices in the training split; a backend that makes
  // training batches itself (fills_batches, worker/model/backend.h) makes x and y_value from them
  // and never reads the host ones (which may then be null).
  ForwardStats forward(const float* x, const int32_t* y_class, const float* y_value, int64_t B, bool collect_norms,
                       const int64_t* idx = nullptr);
  // Gradients of the mean loss of the last forward: zeroes grads() and fills it.
  void backward();
  // forward then backward (the trainer's step): the same values; the CPU's read-out runs
  // both in one pass over each prompt (kernels/readout.h).
  ForwardStats forward_backward(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                bool collect_norms, const int64_t* idx = nullptr);
  // The read-out heads of several models (alike cells, worker/training/cell_group_loop.h) in one call
  // of the backend's read-out algebra on one batch. The first model's readout_begin stages
  // the batch (x [B, N, C] and y_value [B], host memory that must outlive the call; idx as
  // forward's), each other's readout_join reads the first's; both zero the gradients when
  // train and give the model's cell (its weights, prediction, gradient and norm buffers).
  // readout_together(models, cells, norms) trains them all (models[0] the one that began,
  // all on one device), or returns false where the backend does not take them together
  // (then each steps alone); after it, each model's readout_end gives its ForwardStats.
  // The same values as each model's forward_backward.
  ReadoutCell readout_begin(const float* x, const float* y_value, int64_t B, bool train, const int64_t* idx = nullptr);
  ReadoutCell readout_join(int64_t B, bool train);
  static bool readout_together(const std::vector<BasicModel*>& models, std::vector<ReadoutCell>& cells,
                               bool collect_norms);
  ForwardStats readout_end(const ReadoutCell& cell, bool collect_norms);
  // What the last forward predicted (on the backend's device): classify logits
  // [B, classes], readout [B], token_regress [B, N].
  const float* predictions() const { return a_.logits; }
  // The same on the host: the CPU buffer itself, or a device copy in `buf`.
  const float* host_predictions(std::vector<float>& buf);
  // The key mask of the last forward [B, T] (1 = attend; on the device), or null when
  // nothing is padded.
  const float* key_mask() const { return mask_; }

 private:
  template <class T>
  using Array = typename Backend::template Array<T>;

  void ensure_batch(int64_t B);
  // The batch's inputs onto the backend's device (x_, ids_, mask_, y_class_, y_value_).
  void stage_inputs(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                    const int64_t* idx = nullptr);
  // The read-out through the backend's own algebra (kernels/readout.h) where it has one:
  // pred, loss, norms (collect_norms) and, train, the gradients. False: run the op sequence.
  bool readout_fused(bool train, bool collect_norms, ForwardStats& st);
  ReadoutCell readout_cell(bool train);  // this model's buffers as a cell of kernels/readout.h
  ForwardStats forward_classify(bool collect_norms);
  ForwardStats forward_readout(bool collect_norms);
  void backward_classify();
  void backward_readout();
  // Padding mask from the token ids (pad_id >= 0), built on the host (key_mask_host_) and
  // staged to the device; mask_ points at the device copy, or is null without padding.
  void build_key_mask();
  // Which per-layer buffers the backend's path through the transformer layers uses at
  // batch size B (the same path in every layer, decided by the backend from the shapes).
  LayerBuffers layer_buffers(int64_t B) const;
  // The pointers of transformer layer l (and its split heads) for the backend's layer ops.
  LayerForwardArgs layer_forward_args(int64_t l, double* attn_fro, double* jac_fro);
  LayerBackwardArgs layer_backward_args(int64_t l);
  HeadBuffers heads(int64_t l) const;
  // token_regress: the per-token linear head and MSE after the final LN, and its backward
  // into s_.dln (the gradient at the final LN's output).
  void forward_token_head(ForwardStats& st);
  void backward_token_head();

  Backend be_;  // first: built before and destroyed after the buffers it allocated
  ModelConfig cfg_;
  std::vector<TensorInfo> tensors_;
  int64_t decayed_ = 0;
  Array<float> params_mem_, grads_mem_;
  ParameterTensors p_{}, g_{};

  // Activations of the last forward and backward scratch, one buffer each (llm.c);
  // sized for the largest batch seen. A member the model's path does not use is not
  // allocated (null): the transformer's with the readout head, and those layer_buffers
  // leaves out (marked below with the LayerBuffers flag that keeps them in a
  // transformer; the readout head always uses the split heads and dqkv).
  int64_t B_ = 0, cap_B_ = 0;
  LayerBuffers have_{};               // what the buffers were allocated for
  const float* x_ = nullptr;          // on the device
  std::vector<int32_t> ids_host_;     // x as token ids (vocab > 0), checked on the host
  const int32_t* ids_ = nullptr;      // ids_host_ on the device
  std::vector<float> key_mask_host_;  // (B, T) padding mask (pad_id >= 0)
  const float* mask_ = nullptr;       // key_mask_host_ on the device when padded, else null
  const int32_t* y_class_ = nullptr;
  const float* y_value_ = nullptr;
  Array<float> acts_mem_, scratch_mem_;
  ModelActs a_{};
  ModelScratch s_{};
  Array<double> norms_;  // (2, L, B, H): attn_fro then jac_fro per layer, from the kernel
};

using Model = BasicModel<CpuBackend>;

}  // namespace attnsweep
