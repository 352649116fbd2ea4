// The keys of every training task (registry.h: TaskDef::model): the transformer's shape
// and the optimiser's settings, which worker/train_config.cpp reads from the effective
// config. A task changes a training key's default through TaskDef::training_defaults.
#pragma once

#include <vector>

#include "experiments/params.h"

namespace attnsweep {

// dim, layers, heads, mlp_ratio: the transformer's (TaskModel::transformer).
const std::vector<ParamSpec>& model_param_specs();
// steps, batch, lr, optimizer, ...: every training task's.
const std::vector<ParamSpec>& training_param_specs();

// Seconds of training the transformer of `cfg` on one CPU slot: 6 flops per weight per
// token (forward + backward) plus the N^2 attention products, at the ~30 GFLOP/s one
// slot sustains.
double transformer_cost_s(const json& cfg);

}  // namespace attnsweep
