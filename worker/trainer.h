// The trainer: one model on one CPU device, llm.c style. AdamW or SGD over the one
// contiguous parameter buffer (weight decay on the weight matrices only), linear
// warm-up then cosine decay to 0, clipping by the global gradient norm, seeded batch
// sampling, periodic logging / evaluation, checkpoints that resume bit-identically.
//
// Determinism: the same cell, thread count and backend give a bit-identical trajectory.
// Every reduction in kernels/ runs in a fixed order; the batch of step t is a pure
// function of (seed, t) (an epoch permutation from a counter-based generator), so the
// sampler's whole state is (seed, samples seen).
//
// Data parallelism (design.md "Process model": a cell with gpus_per_cell k trains
// data-parallel). TrainConfig::devices = k > 1 holds k Model replicas with identical
// parameters. Step t samples the same global batch of B rows as k = 1 (the sampler is
// unchanged) and replica r takes rows [r B/k, (r+1) B/k) (B % k == 0, a validation
// error otherwise). Each replica runs forward + backward on its shard; then an
// all-reduce of the gradient buffers: g = (g_0 + g_1 + ... + g_{k-1}) / k, summed per
// element in float64 in replica order 0, 1, ..., k-1 (a fixed order, so the result does
// not depend on the thread count), which is the gradient of the mean loss over the
// global batch. Global norm, clipping and ONE optimizer update then run on replica 0,
// whose parameters are copied to the other replicas (a broadcast). The logged loss and
// accuracy are over the global batch (shards weighted by their size); attn_fro/jac_fro
// are the mean over replicas. Eval and checkpoints use replica 0 (parameters and
// optimizer state are the same on every replica after each step; a resumed checkpoint
// is broadcast). k = 2 matches k = 1 within float tolerance, not bitwise: the batch
// sums of the backward are regrouped (per shard, then across shards).
//
// On CPU the k "devices" run one after another in this thread; the parallel work is the
// OpenMP team inside each op, so CI exercises the data-parallel path on any machine.
// Not done yet, for GPUs: one thread (and CUDA stream) per GPU running its replica
// concurrently, and the all-reduce as an NCCL ncclAllReduce (sum, then scale by 1/k) on
// the grads buffer in place of allreduce_grads(); NCCL's ring order is fixed for a fixed
// topology, so a GPU run is deterministic but matches the CPU sum only within tolerance.
// With NCCL every replica would also apply the same update itself instead of the
// broadcast of replica 0's parameters.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "experiments/task.h"
#include "worker/model.h"

namespace attnsweep {

using json = nlohmann::json;

struct TrainConfig {
  int64_t steps = 3000, batch = 128, warmup_steps = 100;
  int64_t log_every = 50, eval_every = 500, eval_batches = 0, checkpoint_every = 0;
  double lr = 1e-3, weight_decay = 0.05, clip = 1.0;
  std::string optimizer = "adamw";  // adamw | sgd
  std::string lr_schedule = "cosine";  // cosine: warm-up then cosine decay to 0; constant: warm-up then lr
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch.optim.AdamW defaults
  uint64_t seed = 0, init_seed = 0;
  double init_std = 0;  // 0: PyTorch nn.Linear init
  int64_t devices = 1;  // k data-parallel replicas; batch % devices == 0
};

// The training keys of a cell config (params.cpp holds their defaults).
TrainConfig train_config_of(const json& config);
// The model of a cell config for a task's data (classes == 0: the regression read-out).
ModelConfig model_config_of(const json& config, const TrainingData& data);

// Learning rate of 0-based step t: lr (t+1)/warmup during the warm-up, then
// lr * (1 + cos(pi (t - warmup) / (steps - warmup))) / 2 (lr_schedule "constant": lr).
double lr_at(const TrainConfig& tc, int64_t t);

// Optimizer over a Model's parameter buffer, with tc.devices data-parallel replicas.
class Trainer {
 public:
  Trainer(const ModelConfig& mc, const TrainConfig& tc);

  // Replica 0: what eval, checkpoints and callers see (all replicas hold the same
  // parameters between steps).
  Model& model() { return *replicas_[0]; }
  Model& replica(int64_t r) { return *replicas_[static_cast<size_t>(r)]; }
  int64_t devices() const { return static_cast<int64_t>(replicas_.size()); }
  // Copies replica 0's parameters to the others (after an update or a checkpoint load).
  void broadcast_params();
  const TrainConfig& config() const { return tc_; }

  struct StepResult {
    ForwardStats fwd;
    double grad_norm = 0;  // before clipping
    double lr = 0;
    bool finite = true;    // loss and gradient finite; false: no update was made
  };
  // One step t (0-based) on a global batch of B rows: forward and backward of each
  // replica on its B / devices rows, all-reduce of the gradients, global norm, clip,
  // one update, broadcast. fwd holds the global-batch loss and correct count.
  StepResult step(const float* x, const int32_t* y_class, const float* y_value, int64_t B, int64_t t,
                  bool collect_norms);

  // Optimizer state (AdamW m, v; SGD keeps none) for checkpoints.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

 private:
  // Replica 0's grads = the mean of every replica's grads (fixed order, float64).
  void allreduce_grads();

  ModelConfig mc_;
  TrainConfig tc_;
  std::vector<std::unique_ptr<Model>> replicas_;
  std::vector<float> m_, v_;
};

// A model's parameter tensors by name, as a task's TrainingData::measure sees them.
ModelWeights weights_of(const Model& model);

// sqrt(sum g^2) in float64, summed in fixed blocks (the same value for any thread count).
double global_norm(const float* g, int64_t n);

// Trains a cell: the `train` of a TaskContext (experiments/task.h). Checkpoints to
// ctx.checkpoint_path ("" = none) every checkpoint_every steps and when ctx.stop is set
// (then returns status "interrupted"); resumes from it when it exists and is valid.
TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data);

}  // namespace attnsweep
