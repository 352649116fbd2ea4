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
// TODO(data-parallel): gpus_per_cell = k > 1 (design.md "Process model") is not
// implemented: the plan is k model replicas, each taking batch / k rows of the same
// sampled batch, an all-reduce of the gradient buffer (NCCL on GPUs, a fixed-order CPU
// sum on CPU devices so CI runs the same path) before clipping, and one optimizer step
// per replica. The trainer is single-device today.
#pragma once

#include <cstdint>
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
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch.optim.AdamW defaults
  uint64_t seed = 0, init_seed = 0;
  double init_std = 0;  // 0: PyTorch nn.Linear init
};

// The training keys of a cell config (params.cpp holds their defaults).
TrainConfig train_config_of(const json& config);
// The model of a cell config for a task's data (classes == 0: the regression read-out).
ModelConfig model_config_of(const json& config, const TrainingData& data);

// Learning rate of 0-based step t: lr (t+1)/warmup during the warm-up, then
// lr * (1 + cos(pi (t - warmup) / (steps - warmup))) / 2.
double lr_at(const TrainConfig& tc, int64_t t);

// Optimizer over a Model's parameter buffer.
class Trainer {
 public:
  Trainer(const ModelConfig& mc, const TrainConfig& tc);

  Model& model() { return model_; }
  const TrainConfig& config() const { return tc_; }

  struct StepResult {
    ForwardStats fwd;
    double grad_norm = 0;  // before clipping
    double lr = 0;
    bool finite = true;    // loss and gradient finite; false: no update was made
  };
  // One step t (0-based) on a batch: forward, backward, global norm, clip, update.
  StepResult step(const float* x, const int32_t* y_class, const float* y_value, int64_t B, int64_t t,
                  bool collect_norms);

  // Optimizer state (AdamW m, v; SGD keeps none) for checkpoints.
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }

 private:
  ModelConfig mc_;
  TrainConfig tc_;
  Model model_;
  std::vector<float> m_, v_;
};

// sqrt(sum g^2) in float64, summed in fixed blocks (the same value for any thread count).
double global_norm(const float* g, int64_t n);

// Trains a cell: the `train` of a TaskContext (experiments/task.h). Checkpoints to
// ctx.checkpoint_path ("" = none) every checkpoint_every steps and when ctx.stop is set
// (then returns status "interrupted"); resumes from it when it exists and is valid.
TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data);

}  // namespace attnsweep
