// What pass 1 of `attnsweep aggregate` (results/aggregate.cpp) keeps of each readable
// cell file: its summary row, flattened config and trajectory shapes, not its datasets;
// and the /cells columns (and summary.csv's) built from the rows.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/cell_file.h"
#include "results/h5.h"
#include "results/table.h"

namespace attnsweep::aggregation {

struct TrajectorySource {
  std::string name;             // "train_loss", "norms_attn_fro"
  std::string path;             // "/train/loss"
  std::vector<uint64_t> shape;  // [T] or [T, L, H]
};

// What pass 1 keeps of one readable cell file: its summary row, not its datasets.
struct Row {
  std::string file;  // runs/NAME.h5 relative to DIR
  CellSummary summary;
  std::map<std::string, json> params;
  std::vector<TrajectorySource> trajectories;
  int64_t size = 0, mtime_ns = 0;  // of the file when read (the index's key)
  int64_t old_row = -1;            // row of the previous aggregate.h5 it is copied from, or -1
};

struct TrajectoryInfo {
  std::vector<uint64_t> shape;  // the largest extent of each axis over cells
  std::string description;
};

// Grows `into` (empty: to the rank of `shape`) to the larger extent of each axis.
void merge_shape(std::vector<uint64_t>& into, const std::vector<uint64_t>& shape);

// Nested config objects become dotted keys ("model.layers"); '/' cannot name a dataset.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out);

// Numeric datasets under `group` (recursively) of the given rank.
// `known`: trajectories whose description is already known (not read again).
void find_trajectories(const h5::Group& group, size_t rank, std::vector<TrajectorySource>& out,
                       std::map<std::string, TrajectoryInfo>& info, const std::map<std::string, TrajectoryInfo>& known);

// The /cells columns: the result schema's fixed columns, then every config key and every
// /final metric (the union over the rows, in key order).
std::vector<Column> build_columns(const std::vector<Row>& rows);

}  // namespace attnsweep::aggregation
