// The parameter schema: every key a grid or cell may set, its type, range, default,
// and when it applies, used by grid validation, cell validation, `plan`, `attnsweep
// schema` and the docs. This file declares the shared keys (task, activation, degree,
// scale, prompt_length, seed); experiments/training_keys.h the model's and the
// optimiser's, which every training task has; each task its own (experiments/registry.h).
// Keys that do not apply to a cell (degree without poly, scale without poly/relu, keys
// of another task) are dropped before hashing.
#pragma once

#include <string>
#include <vector>

#include "experiments/param_spec.h"

namespace attnsweep {

// The keys of a cell of `task`, in the order they are resolved: the shared keys, then
// for a training task the model keys (a transformer) and the training keys, then the
// task's own. nullptr (no task yet): the shared keys.
std::vector<const ParamSpec*> cell_param_specs(const TaskDef* task);

// Every known key (cell-level), each name once: the first declaration of a name (keys
// of several tasks that share a name, such as n_train, agree on type and range, which
// this checks; their defaults and descriptions are the tasks' own). `resources`
// (grid-level) is separate.
const std::vector<ParamSpec>& param_specs();
const ParamSpec* find_param(const std::string& name);

// Names of implemented tasks ("norm_probe", "synthetic", ...), in registry order.
std::vector<std::string> task_names();

// Rough cost of a cell in seconds on one CPU slot (its task's cost_s): the scheduler's
// longest-first order.
double estimate_cost_s(const json& effective_config);

}  // namespace attnsweep
