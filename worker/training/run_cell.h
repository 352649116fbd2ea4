// One cell on one device, in this process: run the task, return its result (the caller
// writes it: coordinator/train_command.h).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <string>

#include "experiments/cell_result.h"
#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

struct RunCellOptions {
  std::string device = "cpu";
  int threads = 1;
  int attempt = 1;
  const std::atomic<int>* stop = nullptr;  // set by a signal handler: stop at the next step
  // Training state of an interrupted cell (docs/results-schema.md: DIR/checkpoints/): resumed from
  // when valid, written on a stop and every checkpoint_every steps, removed once the
  // result file is written. "" = no checkpoints.
  std::string checkpoint;
  // Where the cell's progress goes every few seconds (worker/training/progress.h; "" = its log
  // line only).
  std::string progress;
  // The task's ctx.train: empty for train_cell (worker/training/trainer.h); a group's member trains
  // through its CellGroup (worker/training/cell_group.h).
  std::function<TaskOutput(const json& config, const TaskContext& ctx, const TrainingData& data)> train;
};

// Runs the cell. Returns 0 with *result filled (complete or diverged), 75 when
// interrupted by a signal (a training task leaves its checkpoint), 1 on a transient
// failure, 65 on one another attempt would repeat (an input, deterministic or internal
// error: base/errors.h; message on stderr): the exit statuses of `attnsweep train`.
int run_cell(const std::string& cell_id, const json& config, const RunCellOptions& opt, CellResult* result);

// The time a cell's earlier attempts took, kept next to its checkpoint (at checkpoint +
// kAttemptTimeSuffix) by an attempt that ends without a result (interrupted, or failed
// with an exception), so that the result counts every attempt: its `started` is the first
// one's, its `wall_seconds` their sum. An attempt killed outright (SIGKILL, a crash)
// cannot write it: its time is not counted. Removed with the checkpoint.
inline constexpr const char* kAttemptTimeSuffix = ".time.json";
struct AttemptTime {
  std::string started;  // the first attempt's start, ISO 8601 UTC
  double wall_seconds = 0;
  int64_t attempts = 0;
};

}  // namespace attnsweep
