#include "experiments/training_keys.h"

#include <string>
#include <tuple>

#include "experiments/registry.h"

namespace attnsweep {
namespace {

// The key's default for the cell's task: the task's own (TaskDef::training_defaults) or
// the common one.
ParamSpec training_key(ParamSpec s) {
  s.default_value = [name = s.name, common = s.default_value](const json& cfg) {
    if (const TaskDef* t = task_of(cfg))
      if (auto it = t->training_defaults.find(name); it != t->training_defaults.end()) return it->second;
    return common ? common(cfg) : json();
  };
  return s;
}

std::vector<ParamSpec> make_model_specs() {
  std::vector<ParamSpec> v;
  v.push_back(integer_key("dim", 1, 4096, 64, "model width D"));
  v.push_back(integer_key("layers", 1, 64, 4, "transformer blocks L"));
  ParamSpec heads = integer_key("heads", 1, 64, 4, "attention heads H per block (must divide dim)");
  heads.check = [](const json& value, const json& cfg) -> std::string {
    const int64_t h = value.get<int64_t>(), d = cfg.at("dim").get<int64_t>();
    if (d % h == 0) return "";
    return "heads " + value.dump() + " does not divide dim " + std::to_string(d);
  };
  v.push_back(std::move(heads));
  v.push_back(integer_key("mlp_ratio", 1, 16, 4, "MLP hidden width = mlp_ratio x dim"));
  return v;
}

std::vector<ParamSpec> make_training_specs() {
  std::vector<ParamSpec> v;
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"steps", 0.0, 1e9, 3000, "optimiser steps"},
        std::tuple{"batch", 1.0, 65536.0, 128, "samples per step"},
        std::tuple{"warmup_steps", 0.0, 1e9, 100, "linear warm-up steps before the cosine decay"},
        std::tuple{"log_every", 1.0, 1e9, 50, "steps between rows of /train and /norms"},
        std::tuple{"eval_every", 0.0, 1e9, 500, "steps between test-split evaluations (0: only at the end)"},
        std::tuple{"eval_batches", 0.0, 1e9, 0, "batches of the test split per evaluation (0: all of it)"},
        std::tuple{"checkpoint_every", 0.0, 1e9, 0, "steps between checkpoints (0: only when stopped by a signal)"}})
    v.push_back(training_key(integer_key(name, lo, hi, def, what)));
  v.push_back(training_key(
      seed_following_key("init_seed", "seed of the initial weights; set apart from seed for paired runs")));
  ParamSpec devices =
      integer_key("devices", 1, 64, 1, "devices (GPUs, or CPU devices) this cell trains on, data-parallel");
  // Every device takes batch / devices rows of the step's batch (worker/training/trainer.h).
  devices.check = [](const json& value, const json& cfg) -> std::string {
    const int64_t k = value.get<int64_t>(), b = cfg.at("batch").get<int64_t>();
    if (b % k == 0) return "";
    return "batch " + std::to_string(b) + " is not divisible by devices " + value.dump() +
           " (each device takes batch / devices rows)";
  };
  v.push_back(training_key(std::move(devices)));
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"lr", 0.0, 1e6, 1e-3, "peak learning rate"},
        std::tuple{"weight_decay", 0.0, 1e6, 0.05, "decoupled weight decay of the weight matrices"},
        std::tuple{"clip", 0.0, 1e12, 1.0, "gradient clipping by global norm (0: off)"},
        std::tuple{"init_std", 0.0, 1e6, 0.0,
                   "std of normal initial weight matrices (0: PyTorch nn.Linear's uniform +-1/sqrt(fan_in))"}})
    v.push_back(training_key(number_key(name, lo, hi, def, what)));
  v.push_back(training_key(
      string_key("optimizer", {"adamw", "sgd"}, "adamw", "AdamW (betas 0.9, 0.999, eps 1e-8) or plain SGD")));
  v.push_back(
      training_key(string_key("lr_schedule", {"cosine", "constant"}, "cosine",
                              "after the warm-up: cosine decay to 0 over the remaining steps, or a constant lr")));
  ParamSpec precision = string_key("precision", {"fp32", "bf16", "tf32"}, "fp32",
                                   "arithmetic of the GEMMs and attention (kernels/precision.h): fp32; bf16 mixed "
                                   "precision (bf16 inputs, fp32 accumulation and master weights); tf32 GEMMs. "
                                   "bf16 and tf32 need a CUDA device");
  precision.omit_at_default = true;  // fp32 cells keep the ids they had before the key existed
  v.push_back(training_key(std::move(precision)));
  return v;
}

}  // namespace

const std::vector<ParamSpec>& model_param_specs() {
  static const std::vector<ParamSpec> specs = make_model_specs();
  return specs;
}

const std::vector<ParamSpec>& training_param_specs() {
  static const std::vector<ParamSpec> specs = make_training_specs();
  return specs;
}

double transformer_cost_s(const json& cfg, double test_samples) {
  const double n = cfg.at("prompt_length").get<double>(), d = cfg.at("dim").get<double>();
  const double per_token =
      cfg.at("layers").get<double>() * (2 * (4 + 2 * cfg.at("mlp_ratio").get<double>()) * d * d + 4 * n * d);
  const double steps = cfg.at("steps").get<double>(), batch = cfg.at("batch").get<double>();
  const auto every = cfg.at("eval_every").get<int64_t>(), eval_batches = cfg.at("eval_batches").get<int64_t>();
  // Evaluations: one every eval_every steps and one at the end (worker/training/cell_loop.h).
  const auto whole = every > 0 ? static_cast<int64_t>(steps) / every : 0;
  const double evals = static_cast<double>(whole + (every > 0 && whole * every == static_cast<int64_t>(steps) ? 0 : 1));
  if (eval_batches > 0) test_samples = std::min(test_samples, static_cast<double>(eval_batches) * batch);
  // Training: 3x the forward's flops at 68 Gflop/s on one core (calibrated on
  // paperA_fmnist's 54 cells); an evaluation: the forward's flops over the test samples at
  // 90 Gflop/s (image_smoke's cells on the Xeon VM of 2026-12-05: two evaluations of 10,000
  // samples were 2.4 of a cell's 8.5 s of CPU, which plan left out); 0.5 s a cell.
  return 3 * steps * batch * n * per_token / 68e9 + evals * test_samples * n * per_token / 90e9 + 0.5;
}

}  // namespace attnsweep
