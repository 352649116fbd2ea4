// What one cell produced: the task's output with where and when it ran. run_cell makes
// it; results/cell_file.h writes and reads it (worker/ writes no result file itself).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

// A dataset of the result file: what a task returns (its path, shape, data and
// description, stored as the dataset's `description` attribute).
using ResultDataset = TaskSeries;

struct CellResult {
  std::string cell_id;
  json config;                      // effective config (stored as canonical JSON text)
  std::string status = "complete";  // complete | diverged
  int64_t diverged_at_step = -1;
  std::string device = "cpu";
  double wall_seconds = 0;
  std::string started, finished;                // ISO 8601 UTC
  std::map<std::string, double> final_metrics;  // attributes of /final
  std::vector<ResultDataset> datasets;
  // More root attributes (host, gpu_name, gpu_uuid, slurm_job_id, ...): where it ran.
  std::map<std::string, std::string> provenance;
};

}  // namespace attnsweep
