// A task turns an effective cell config into metrics and datasets. Tasks know nothing
// of files, MPI or slots: the worker writes what they return.
#pragma once

#include "kernels/activation.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnsweep {

using json = nlohmann::json;

struct TaskContext {
  std::string device = "cpu";
  int threads = 1;
  int attempt = 1;                          // 1 for the first try of a cell
  const std::atomic<int>* stop = nullptr;   // nonzero: a signal asked us to stop
  bool stop_requested() const { return stop && stop->load() != 0; }
};

struct TaskSeries {
  std::string path;                  // "/probe/attn_fro"
  std::vector<uint64_t> shape;
  std::vector<double> data;
  std::string description;
};

struct TaskOutput {
  std::string status = "complete";   // complete | diverged | interrupted
  int64_t diverged_at_step = -1;
  std::map<std::string, double> final_metrics;
  std::vector<TaskSeries> series;
};

// Runs the cell's task. Throws std::runtime_error on failure.
TaskOutput run_task(const json& config, const TaskContext& ctx);

TaskOutput run_norm_probe(const json& config, const TaskContext& ctx);
TaskOutput run_synthetic(const json& config, const TaskContext& ctx);

// The activation spec of a cell config (activation, degree, scale).
ActivationSpec activation_spec_of(const json& config);

}  // namespace attnsweep
