// One cell on one device, in this process: run the task, write the result file.
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <string>

namespace attnsweep {

using json = nlohmann::json;

struct RunCellOptions {
  std::string device = "cpu";
  int threads = 1;
  int attempt = 1;
  const std::atomic<int>* stop = nullptr;  // set by a signal handler: stop at the next step
  // Training state of an interrupted cell (contract.md DIR/checkpoints/): resumed from
  // when valid, written on a stop and every checkpoint_every steps, removed once the
  // result file is written. "" = no checkpoints.
  std::string checkpoint;
};

// Exit status of `attnsweep train`: 0 result written (complete or diverged),
// 75 interrupted by a signal (no result written; a training task leaves its
// checkpoint), 1 failure (message on stderr).
int run_cell(const std::string& cell_id, const json& config, const std::string& out_path,
             const RunCellOptions& opt);

// "2026-11-29T16:02:11Z"
std::string iso_utc_now();

}  // namespace attnsweep
