// The trainer, llm.c style: AdamW or SGD over the one contiguous parameter buffer (weight
// decay on the weight matrices only), linear warm-up then cosine decay to 0, clipping by
// the global gradient norm, seeded batch sampling, periodic logging / evaluation,
// checkpoints that resume bit-identically. One trainer for every backend
// (worker/model/backend.h): Trainer on the CPU, CudaTrainer on GPUs (worker/model/backend_cuda.h);
// train_cell picks it from the cell's device ("cpu", or "cuda" / "cuda:N").
//
// Determinism: the same cell, thread count and backend give a bit-identical trajectory.
// Every reduction in kernels/ runs in a fixed order; the batch of step t is a pure
// function of (seed, t) (an epoch permutation from a counter-based generator), so the
// sampler's whole state is (seed, samples seen). The CUDA trainer is deterministic for
// a fixed GPU model, CUDA / cuBLAS / NCCL version and device count; it matches the CPU
// trajectory within float tolerance, not bitwise (cuBLAS and the GPU reductions sum in
// other orders). Checkpoints have one format (host float32 parameters and optimizer
// state), so a cell can resume on either backend.
//
// Data parallelism (docs/architecture.md, "Process model": a cell with gpus_per_cell k trains
// data-parallel). TrainConfig::devices = k > 1 holds k model replicas with identical
// parameters. Step t samples the same global batch of B rows as k = 1 (the sampler is
// unchanged) and replica r takes rows [r B/k, (r+1) B/k) (B % k == 0, a validation
// error otherwise). Each replica runs forward + backward on its shard; then an
// all-reduce leaves g = (g_0 + g_1 + ... + g_{k-1}) / k, the gradient of the mean loss
// over the global batch. The logged loss and accuracy are over the global batch (shards
// weighted by their size); attn_fro/jac_fro are the mean over replicas; grad_norm is
// that of the reduced gradient. Eval and checkpoints use replica 0 (every replica holds
// the same parameters and optimizer state after each step; a resumed checkpoint is
// loaded into all). k = 2 matches k = 1 within float tolerance, not bitwise: the batch
// sums of the backward are regrouped (per shard, then across shards).
// - CPU: the k "devices" run one after another in this thread (the parallel work is the
//   OpenMP team inside each op, so CI exercises the path on any machine). The all-reduce
//   sums per element in float64 in replica order 0, 1, ..., k-1 into replica 0 (a fixed
//   order: the result does not depend on the thread count); global norm, clipping and ONE
//   optimizer update run on replica 0, whose parameters are then copied to the others.
// - CUDA: replica r lives on GPU first + r with its own stream; the k forward/backward
//   passes run at once, one host thread each; the all-reduce is ncclAllReduce (sum, in
//   place, float32 in NCCL's fixed ring/tree order) on every replica's gradient buffer,
//   then a scale by 1/k; every replica then clips with the same coefficient and applies
//   the same update itself (each keeps its own AdamW m, v), so no parameter broadcast is
//   needed. NCCL gives every rank the same reduced bits, so the replicas stay identical.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/task.h"
#include "kernels/model_ops.h"  // global_norm
#include "worker/model/model.h"
#include "worker/training/train_config.h"  // TrainConfig, train_config_of, model_config_of, lr_at

namespace attnsweep {

// What one optimizer step measured.
struct TrainStepResult {
  ForwardStats fwd;
  double grad_norm = 0;  // before clipping
  double lr = 0;
  bool finite = true;  // loss and gradient finite; false: no update was made
};

// Optimizer over a model's parameter buffer, with tc.devices data-parallel replicas.
template <class Backend>
class BasicTrainer {
 public:
  using ModelType = BasicModel<Backend>;
  using StepResult = TrainStepResult;

  // CUDA: replica r on GPU first_device + r (ignored on the CPU).
  BasicTrainer(const ModelConfig& mc, const TrainConfig& tc, int first_device = 0);

  // Replica 0: what eval, checkpoints and callers see (all replicas hold the same
  // parameters between steps).
  ModelType& model() { return *replicas_[0]; }
  ModelType& replica(int64_t r) { return *replicas_[static_cast<size_t>(r)]; }
  int64_t devices() const { return static_cast<int64_t>(replicas_.size()); }
  // Copies replica 0's parameters to the others (after an update or a checkpoint load).
  void broadcast_params();
  const TrainConfig& config() const { return tc_; }

  // One step t (0-based) on a global batch of B rows (host memory): forward and backward
  // of each replica on its B / devices rows, all-reduce of the gradients, global norm,
  // clip, update. fwd holds the global-batch loss and correct count.
  // idx (may be null): the rows' sample indices, for a backend that makes the batch itself
  // (BasicModel::forward).
  StepResult step(const float* x, const int32_t* y_class, const float* y_value, int64_t B, int64_t t,
                  bool collect_norms, const int64_t* idx = nullptr);
  // The rest of step t once every replica's gradients are in place and r.fwd is filled
  // (what step runs after the backward; a group of cells computes its gradients together,
  // worker/training/cell_group.h): global norm, clip, update; r.grad_norm, r.lr and r.finite.
  void apply_gradients(StepResult& r, int64_t t);

  // Host copies of the state every replica shares, for checkpoints: parameters and the
  // optimizer state (AdamW m, v; SGD keeps none: empty), and loading them into every replica.
  std::vector<float> params_host();
  std::vector<float> m_host();
  std::vector<float> v_host();
  int64_t optimizer_state_size() const { return opt_.empty() ? 0 : static_cast<int64_t>(opt_[0].m.size()); }
  void load_state(const std::vector<float>& params, const std::vector<float>& m, const std::vector<float>& v);

  // Steps that ran as one launch (a replayed or just captured CUDA graph) so far.
  int64_t graphed_steps() { return model().backend().graphed_steps(); }

 private:
  template <class T>
  using Array = typename Backend::template Array<T>;
  struct OptimizerState {
    Array<float> m, v;
  };
  // Clip with `coef` (< 1: scale) and apply the update of step t on replica r: the one
  // update sequence, run op by op or recorded into a step graph (step).
  void update(int64_t r, double coef, float lr, int64_t t);

  ModelConfig mc_;
  TrainConfig tc_;
  std::vector<std::unique_ptr<ModelType>> replicas_;
  std::vector<OptimizerState> opt_;  // one per replica that updates (CPU: replica 0 only)
  std::unique_ptr<typename Backend::Collective> collective_;
};

using Trainer = BasicTrainer<CpuBackend>;

// OpenBLAS single-threaded while it lives (the previous count back after): the CPU
// trainer's GEMMs split their rows over the OpenMP team themselves (kernels/cpu), so for
// a whole cell (or group of cells) rather than toggled around each call.
class BlasOneThread {
 public:
  BlasOneThread();
  ~BlasOneThread();
  BlasOneThread(const BlasOneThread&) = delete;
  BlasOneThread& operator=(const BlasOneThread&) = delete;

 private:
  int saved_;
};

// A model's parameter tensors by name, as a task's TrainingData::measure sees them:
// a CPU model's own buffer, or `host_params` (num_params() floats, e.g. a device
// model's get_params) with the tensor layout `tensors`.
ModelWeights weights_of(const Model& model);
ModelWeights weights_of(const std::vector<TensorInfo>& tensors, const float* host_params);

}  // namespace attnsweep
