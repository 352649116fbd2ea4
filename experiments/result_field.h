// One field of the result schema (experiments/result_schema.h): its kind, type, shape and
// description, and the builders a task's TaskDef::outputs uses (experiments/registry.h).
// Below the registry, which declares each task's own fields with it; the schema, which
// reads the registry, sits above.
#pragma once

#include <string>
#include <vector>

namespace attnsweep {

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

}  // namespace attnsweep
