// The result schema: what a cell's result file holds (runs/<id>.h5), declared once.
// run_cell and the trainer declare here what they write, each task in its TaskDef (root attributes,
// /final metrics, datasets: type, shape, description, for which tasks), and everything
// else reads it: the trainer and tasks take their datasets' descriptions from it, run_cell
// refuses an output it does not declare, aggregate takes its fixed columns, fitted metrics
// and trajectory groups from it, the report its names and labels (as JSON), and
// docs/results-schema.md its table (`attnsweep results-schema --markdown`).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

enum class ResultKind {
  root_attribute,  // an attribute of the file's root group
  final_metric,    // an attribute of /final: one number, a column of summary.csv
  dataset,         // a dataset (chunked, compressed, with a `description` attribute)
};
enum class ResultType { string, int64, float32, float64 };

struct ResultField {
  ResultKind kind = ResultKind::dataset;
  std::string name;  // the attribute's or metric's name, or the dataset's path
  ResultType type = ResultType::float64;
  std::vector<std::string> shape;  // a dataset's axes, row-major, named in result_axes()
  std::string writer;              // who writes it: run_cell, the trainer, or a task
  std::vector<std::string> tasks;  // the tasks whose cells have it; empty = every task
  std::string when;                // "" = always for those tasks, else when it is there
  std::string description;         // a dataset's `description` attribute; a column's
  bool column = false;             // root attribute: one of /cells' fixed first columns, in this order
  bool fitted = false;             // final metric: fitted against prompt_length (aggregate's /fits)
  bool trajectory = false;         // dataset: its group's datasets become /trajectories/<group>_<name>
  std::string label;               // what the report's axes call it ("" = its name)
};

// A task's own /final metric and dataset, for its TaskDef::outputs (experiments/registry.h);
// the schema fills in the writer and the task.
ResultField make_final_metric(std::string name, std::string description, bool fitted = false, std::string when = "",
                              std::string label = "");
ResultField make_dataset(std::string path, ResultType type, std::vector<std::string> shape, std::string description,
                         bool trajectory, std::string when = "", std::string label = "");

// Every field, root attributes first (the fixed columns in column order), then the
// /final metrics and the datasets.
const std::vector<ResultField>& result_schema();

// The named axes of the datasets' shapes and what each counts.
const std::vector<std::pair<std::string, std::string>>& result_axes();

// The field of that kind and name, or nullptr.
const ResultField* find_result_field(ResultKind kind, std::string_view name);

// Whether `field` is written for cells of `task`.
bool written_for(const ResultField& field, std::string_view task);

// The root attributes that are /cells' fixed columns, in order (cell_id, status, ...).
std::vector<const ResultField*> result_columns();
// The /final metrics fitted against prompt_length.
std::vector<std::string> fitted_metrics();
// The groups ("/train") whose numeric datasets of `rank` dimensions aggregate gathers
// into /trajectories, in the order of their first declared trajectory.
std::vector<std::string> trajectory_groups(size_t rank);

// A dataset as a task or the trainer returns it, its description from the declaration.
// Throws std::logic_error when `path` is not declared or the data's type or the shape's
// rank differs from the declaration (a programming error, caught by any run of the task).
TaskSeries result_series(std::string_view path, std::vector<uint64_t> shape, TaskSeries::Data data);
// A task's metric measured at every evaluation: final metric `name`, trajectory `path`.
EvalMetric result_eval_metric(std::string_view name, std::string_view path);

// "" when every final metric and dataset of `out` is declared for `task`, else what is
// not (run_cell fails the cell with it rather than write an undeclared field).
std::string undeclared_outputs(const TaskOutput& out, std::string_view task);

// `attnsweep results-schema --json`: {"fields": [...], "axes": {...}, "columns": [...],
// "fitted": [...], "trajectory_groups": {"1": [...], "3": [...]}}; the report's argv[4].
json result_schema_json();
// `attnsweep results-schema --markdown`: the table of docs/results-schema.md.
std::string result_schema_markdown();

}  // namespace attnsweep
