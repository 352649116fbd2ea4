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

#include "experiments/result_field.h"
#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

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
