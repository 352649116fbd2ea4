// A training cell's settings, read from its effective config: TrainConfig (the training
// keys of experiments/training_keys.cpp) and the learning-rate schedule. Its model:
// model_config_of (worker/model/model_layout.h).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "experiments/task.h"
#include "worker/model/model.h"

namespace attnsweep {

using json = nlohmann::json;

struct TrainConfig {
  int64_t steps = 3000, batch = 128, warmup_steps = 100;
  int64_t log_every = 50, eval_every = 500, eval_batches = 0, checkpoint_every = 0;
  double lr = 1e-3, weight_decay = 0.05, clip = 1.0;
  std::string optimizer = "adamw";                // adamw | sgd
  std::string lr_schedule = "cosine";             // cosine: warm-up then cosine decay to 0; constant: warm-up then lr
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // torch.optim.AdamW defaults
  uint64_t seed = 0, init_seed = 0;
  double init_std = 0;  // 0: PyTorch nn.Linear init
  int64_t devices = 1;  // k data-parallel replicas; batch % devices == 0
  // CUDA, one replica: run the steps that do not log as one captured CUDA graph each
  // (worker/training/trainer_impl.h, BasicTrainer::step). Not a grid key (it changes no result); off unless
  // ATTNSWEEP_CUDA_GRAPHS=1 until it has been checked on a GPU (train_cell).
  bool cuda_graphs = false;
};

// The training keys of a training task's effective config (experiments/training_keys.cpp
// declares them and their defaults).
TrainConfig train_config_of(const json& config);

// Learning rate of 0-based step t: lr (t+1)/warmup during the warm-up, then
// lr * (1 + cos(pi (t - warmup) / (steps - warmup))) / 2 (lr_schedule "constant": lr).
double lr_at(const TrainConfig& tc, int64_t t);

}  // namespace attnsweep
