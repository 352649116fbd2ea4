// `attnsweep train`: the child process of every attempt. Runs one cell in this process
// (worker/training/run_cell.h), writes its result file atomically (results/cell_file.h), then
// drops the cell's checkpoint, whose job is done once the result is durable.
#pragma once

#include <string>
#include <vector>

#include "worker/training/run_cell.h"

namespace attnsweep {

// Exit status of `attnsweep train`: 0 result written (complete or diverged), 75
// interrupted by a signal (no result written; a training task leaves its checkpoint),
// 1 failure, 65 a failure another attempt would repeat (message on stderr).
int train_cell_to_file(const std::string& cell_id, const json& config, const std::string& out_path,
                       const RunCellOptions& opt);

// One cell of a group in this process (worker/training/cell_group.h): cell i of configs, its result
// to out_paths[i], its checkpoint at checkpoints[i] and its progress at progress[i] ("" none),
// each on a thread of its own that ends as train_cell_to_file does. Returns 0 when every cell wrote its result, 75
// when a signal interrupted any (and none failed), else 1.
int train_group_to_files(const std::vector<json>& configs, const std::vector<std::string>& out_paths,
                         const std::vector<std::string>& checkpoints, const std::vector<std::string>& progress,
                         const RunCellOptions& opt);

}  // namespace attnsweep
