// `attnsweep train`: the child process of every attempt. Runs one cell in this process
// (worker/run_cell.h), writes its result file atomically (results/cell_file.h), then
// drops the cell's checkpoint, whose job is done once the result is durable.
#pragma once

#include <string>

#include "worker/run_cell.h"

namespace attnsweep {

// Exit status of `attnsweep train`: 0 result written (complete or diverged), 75
// interrupted by a signal (no result written; a training task leaves its checkpoint),
// 1 failure (message on stderr).
int train_cell_to_file(const std::string& cell_id, const json& config, const std::string& out_path,
                       const RunCellOptions& opt);

}  // namespace attnsweep
