// Tables that attnsweep writes twice, as HDF5 datasets (one per column) and as CSV:
// aggregate.h5 /cells + summary.csv (results/aggregate.cpp), /paired + paired.csv
// (results/paired.cpp). One column type, one number format, one CSV dialect.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "results/h5.h"

namespace attnsweep {

// A missing number: an empty cell of a column, a trajectory's unread steps, a fit
// without enough points.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// summary.csv's value of a parameter that does not apply to a cell (degree beside softmax,
// scale beside sigmoid): one representation, a word pandas keeps as a group key. It is
// also scale's name for "unscaled", which is what a scale that does not apply means.
inline constexpr const char* kNotApplicable = "none";

// Shortest text that reads back as the same double ("0.001", "3", "1e-05"); "" for NaN.
std::string format_number(double v);

// A parameter value as text: strings bare, numbers compact (format_number), booleans
// `true`/`false` as in the grid. The one formatter of config values: group labels
// (/fits, /paired, /cell_groups) and the string columns of /cells and summary.csv.
std::string label_value(const nlohmann::json& v);

// What the analyses of aggregate (results/paired.h, results/best_scale.h) read of a
// cell: its flattened effective config, its /final metrics, and whether it completed.
struct CellRow {
  std::map<std::string, nlohmann::json> params;
  std::map<std::string, double> metrics;
  bool complete = false;  // diverged cells take no part
};

// Replicates, pooled in a fit or a paired comparison rather than naming its group:
// `seed` and any `*_seed` (`init_seed`, `model.seed`).
bool replicate_key(const std::string& k);

// The group a cell belongs to in a fit or comparison: its parameters but prompt_length,
// the replicates and any key `skip` names, as k=v in key order.
std::string group_label(const std::map<std::string, nlohmann::json>& params,
                        const std::function<bool(const std::string&)>& skip = {});

// A cell's activation as the papers and the report write it, from the registry
// (kernels/activation.h): "softmax", "s³/√N" (an activation taking a degree is s^p),
// "ReLU/N", "ReLU c=0.25" (a numeric scale); "" when the cell has no known activation.
// summary.csv's `label` column and the report's legends.
std::string activation_label(const std::map<std::string, nlohmann::json>& params);

// One column: int64, float64 (NaN = missing) or strings ("" = missing).
// One field of every row, as a column: column_of<double>(fits, &Fit::slope), or with a
// function of the row. V is the column's element type (default: the field's).
template <class V = void, class R, class Get>
auto column_of(const std::vector<R>& rows, Get get) {
  using T = std::conditional_t<std::is_void_v<V>, std::decay_t<std::invoke_result_t<Get, const R&>>, V>;
  std::vector<T> out;
  out.reserve(rows.size());
  for (const R& r : rows) out.push_back(std::invoke(get, r));
  return out;
}

struct Column {
  enum Type { Int, Float, String } type = Float;
  std::string name, description;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;
  // What the CSV writes for a missing value ("" by default). summary.csv's parameter
  // columns write kNotApplicable: a default pandas groupby on the grid's keys keeps a
  // cell whose key does not apply (degree beside softmax), which an empty field (NaN) drops.
  std::string missing_csv;

  std::string csv(size_t i) const;
};

Column string_column(std::string name, std::string description, const std::vector<std::string>& values);
Column float_column(std::string name, std::string description, const std::vector<double>& values);
Column int_column(std::string name, std::string description, const std::vector<int64_t>& values);

// A parameter or metric column from per-row JSON values (null = missing): int64 when
// every row has an integer value, float64 (NaN = missing) when all present
// values are numbers, otherwise strings ("" = missing; other values by label_value, so a
// boolean parameter is `true`/`false`, as the grid writes it).
Column json_column(std::string name, std::string description, const std::vector<nlohmann::json>& values);

// RFC 4180 CSV with a header line, written atomically (temporary + rename).
void write_csv(const std::string& path, const std::vector<Column>& cols, size_t rows);

// The column as a dataset of `g` named after it, with its description.
void write_column(h5::Group& g, const Column& c);

}  // namespace attnsweep
