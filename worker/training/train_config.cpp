// A training cell's settings (worker/training/train_config.h): the training keys, the model of a
// task's data, the learning rate of a step.
#include "worker/training/train_config.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "base/errors.h"
#include "experiments/params.h"

namespace attnsweep {

// The training keys of a training task's effective config: every one is there, with
// the default of experiments/training_keys.cpp where the grid did not set it.
TrainConfig train_config_of(const json& c) {
  TrainConfig tc;
  tc.steps = c.at("steps").get<int64_t>();
  tc.batch = c.at("batch").get<int64_t>();
  tc.warmup_steps = c.at("warmup_steps").get<int64_t>();
  tc.log_every = std::max<int64_t>(1, c.at("log_every").get<int64_t>());
  tc.eval_every = c.at("eval_every").get<int64_t>();
  tc.eval_batches = c.at("eval_batches").get<int64_t>();
  tc.checkpoint_every = c.at("checkpoint_every").get<int64_t>();
  tc.lr = c.at("lr").get<double>();
  tc.weight_decay = c.at("weight_decay").get<double>();
  tc.clip = c.at("clip").get<double>();
  tc.optimizer = c.at("optimizer").get<std::string>();
  tc.lr_schedule = c.at("lr_schedule").get<std::string>();
  tc.seed = c.at("seed").get<uint64_t>();
  tc.init_seed = c.at("init_seed").get<uint64_t>();
  tc.init_std = c.at("init_std").get<double>();
  tc.devices = c.at("devices").get<int64_t>();
  if (tc.devices < 1) throw InputError({"devices: expected an integer >= 1, got " + std::to_string(tc.devices)});
  if (tc.batch % tc.devices != 0)
    throw InputError(
        {"batch " + std::to_string(tc.batch) + " is not divisible by devices " + std::to_string(tc.devices)});
  if (tc.optimizer != "adamw" && tc.optimizer != "sgd")
    throw InputError({"optimizer: expected adamw or sgd, got \"" + tc.optimizer + "\""});
  if (tc.lr_schedule != "cosine" && tc.lr_schedule != "constant")
    throw InputError({"lr_schedule: expected cosine or constant, got \"" + tc.lr_schedule + "\""});
  return tc;
}

double lr_at(const TrainConfig& tc, int64_t t) {
  if (t < tc.warmup_steps) return tc.lr * static_cast<double>(t + 1) / static_cast<double>(tc.warmup_steps);
  const int64_t decay = tc.steps - tc.warmup_steps;
  if (decay <= 0 || tc.lr_schedule == "constant") return tc.lr;
  const double frac = static_cast<double>(t - tc.warmup_steps) / static_cast<double>(decay);
  return tc.lr * 0.5 * (1.0 + std::cos(M_PI * frac));
}

}  // namespace attnsweep
