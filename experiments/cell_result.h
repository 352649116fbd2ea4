// What one cell produced. CellSummary is the part every reader needs (the result file's
// root attributes and /final: what `run` resumes from, `status` counts and aggregate's
// rows and index hold); CellResult adds the datasets and provenance that run_cell makes
// and results/cell_file.h writes (worker/ writes no result file itself). It sits here,
// below both: worker/ makes results, results/ writes and reads them, and neither includes
// the other.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "experiments/cell_status.h"
#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

// A dataset of the result file: what a task returns (its path, shape, data and
// description, stored as the dataset's `description` attribute).
using ResultDataset = TaskSeries;

struct CellSummary {
  std::string cell_id;
  json config;                               // effective config (stored as canonical JSON text)
  CellStatus status = CellStatus::complete;  // complete | diverged in a result file
  int64_t diverged_at_step = -1;
  std::string device = "cpu";
  double wall_seconds = 0;
  std::map<std::string, double> final_metrics;  // attributes of /final
};

// {"cell_id", "config", "status" (its name), "diverged_at_step", "device", "wall_seconds",
// "final": {metric: value, null when not finite}}: aggregate's index keeps a row so.
void to_json(json& j, const CellSummary& s);
// The inverse; throws json::exception for a missing or mistyped key and
// std::runtime_error for a status that names none.
void from_json(const json& j, CellSummary& s);

struct CellResult : CellSummary {
  // ISO 8601 UTC. `started` and CellSummary::wall_seconds count every attempt that led to
  // this result (worker/training/run_cell.h AttemptTime); the last attempt's own are kept too.
  std::string started, finished;
  int64_t attempts = 1;
  std::string last_attempt_started;
  double last_attempt_wall_seconds = 0;
  std::vector<ResultDataset> datasets;
  // More root attributes (host, gpu_name, gpu_uuid, slurm_job_id, ...): where it ran.
  std::map<std::string, std::string> provenance;
};

}  // namespace attnsweep
