// The keys of every training task (registry.h: TaskDef::model): the transformer's shape
// and the optimiser's settings, which worker/training/train_config.cpp reads from the effective
// config. A task changes a training key's default through TaskDef::training_defaults.
#pragma once

#include <vector>

#include "experiments/param_spec.h"

namespace attnsweep {

// dim, layers, heads, mlp_ratio: the transformer's (TaskModel::transformer).
const std::vector<ParamSpec>& model_param_specs();
// steps, batch, lr, optimizer, ...: every training task's.
const std::vector<ParamSpec>& training_param_specs();

// Seconds of a transformer cell of `cfg` on one CPU slot: its training (forward and
// backward), its evaluations of `test_samples` test samples (the task's test split, or
// eval_batches x batch of it) and a fixed cost (docs/performance.md#how-plan-estimates-a-grid).
double transformer_cost_s(const json& cfg, double test_samples);

}  // namespace attnsweep
