// The task registry: every task a grid's `task` can name, one TaskDef each. A task lives
// in one file (experiments/<task>.cpp) that defines its TaskDef: what it is, the keys it
// adds to the shared ones (experiments/params.h) with their defaults, ranges and checks,
// its cost estimate and the shape of its data (what the trainer and the GPU memory estimate,
// worker/model/gpu_memory.h, build the model from), the result fields it writes and its run function. Grid validation,
// `attnsweep schema`, `plan`'s cost order, the result schema and run_task read it; adding
// a task is its file plus one line in task_registry() (experiments/tasks.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/param_spec.h"
#include "experiments/result_field.h"
#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

// What model, if any, the trainer (worker/training/trainer.h) trains for the task.
enum class TaskModel {
  none,         // no training: the task computes its metrics itself
  transformer,  // the transformer: the model keys (dim, layers, ...) and the training keys apply
  readout,      // paper B's one-layer read-out, shaped by the task: the training keys apply
};

// What the trained model predicts, for the trainer's final metrics (test_accuracy, ...).
enum class TaskTarget { none, classes, value, per_token };

// Cells trained as one (a group: one child process trains them in lockstep,
// worker/training/cell_group.h): which cells of a task may share a group, and which share batches.
struct TaskFusion {
  // Keys whose values may differ among the cells of a group: cells that agree on every
  // other key of their effective config may be grouped. Empty: the task's cells never are.
  std::vector<std::string> may_differ;
  // Those of them the training data depends on: cells of a group that agree on these
  // draw the very same batches, made once a step.
  std::vector<std::string> data;
  // Cells per group when neither `run --fuse` nor the grid's resources.fuse says.
  int default_size = 1;
  // What a cell adds to a group's time when an earlier member draws the same data (equal
  // `data` keys), as a share of its cost_s alone (measured;
  // docs/performance.md#how-plan-estimates-a-grid); nullptr: 1.
  double (*added_cell_share)(const json& effective_config) = nullptr;
};

struct TaskDef {
  std::string name;
  std::string description;
  bool attention = true;  // the cell has an attention activation (activation, degree, scale apply)
  // Prompt lengths the task can make, inclusive (max 0: the task has no prompt);
  // min_prompt_why says why it cannot make a shorter one ("" when min is 1).
  int64_t min_prompt_length = 1, max_prompt_length = 0;
  std::string min_prompt_why;
  // A further check of the prompt length (the image task's patch counts): "" when fine.
  std::string (*check_prompt_length)(int64_t n) = nullptr;
  TaskModel model = TaskModel::none;
  TaskTarget target = TaskTarget::none;
  // The training keys whose default differs for this task (paper B: plain SGD, ...).
  std::map<std::string, json> training_defaults;
  // The task's own keys, resolved in order after the shared and training keys; their
  // `applies` may be empty (they apply to every cell of the task).
  std::vector<ParamSpec> keys;
  // Rough seconds of one cell on one CPU slot (the scheduler runs the longest first).
  double (*cost_s)(const json& effective_config) = nullptr;
  // The shape of a cell's data (experiments/task.h DataShape): what its run() gives the
  // trainer, and what the GPU memory estimate (worker/model/gpu_memory.h) builds the model
  // from; nullptr: the task trains nothing.
  DataShape (*data_shape)(const json& effective_config) = nullptr;
  // The config the trainer builds the model from (its dim, heads, layers, ...), when it
  // is not the cell's own (icl_regression: the read-out's width is d + 1); read by run()
  // and by the GPU memory estimate.
  json (*model_config)(const json& effective_config) = nullptr;
  // Its own /final metrics and datasets (make_final_metric, make_dataset); the writer
  // and the task are filled in by the result schema.
  std::vector<ResultField> outputs;
  TaskOutput (*run)(const json& effective_config, const TaskContext& ctx) = nullptr;
  TaskFusion fusion;  // default: none
  // The grid declares further keys of its cells (the command task: the user's program's
  // own keys, experiments/params.h DeclaredKeysScope).
  bool declared_keys = false;
  // Its cells' /final metrics and /train trajectories are the program's own, named at run
  // time (the command task): any /final metric and any 1-D /train dataset is accepted.
  bool open_outputs = false;

  bool trains() const { return model != TaskModel::none; }
};

// Every task, in the order the docs and the result schema list them.
const std::vector<const TaskDef*>& task_registry();
// The task of that name, or nullptr.
const TaskDef* find_task(std::string_view name);
// The task a config names (its "task" key), or nullptr.
const TaskDef* task_of(const json& config);

// A cell's config without its task's fusion.may_differ keys: cells with equal identities
// may train as one group. null when the config's task does not fuse.
json fusion_identity(const json& config);
// The values of its task's fusion.data keys, as text: cells of a group with equal data keys
// draw the same batches.
std::string fusion_data_key(const json& config);

// The tasks' definitions (each in its own file).
const TaskDef& norm_probe_task();
const TaskDef& image_task();
const TaskDef& icl_regression_task();
const TaskDef& listops_task();
const TaskDef& pde_task();
const TaskDef& synthetic_task();
const TaskDef& command_task();

}  // namespace attnsweep
