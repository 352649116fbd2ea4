// The parameter schema: every key a grid or cell may set, its type, range, default,
// and when it applies. One table, used by grid validation, cell validation, `plan`
// and the docs. Keys that do not apply to a cell (degree without poly, scale without
// poly/relu, task parameters of another task) are dropped before hashing.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

namespace attnsweep {

using json = nlohmann::json;

enum class ParamType { integer, number, string, boolean, scale };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::number;
  double min = -1e300;                 // inclusive bounds for integer/number
  double max = 1e300;
  std::vector<std::string> choices;    // string: allowed values (empty = any)
  std::string description;
  // Whether the key applies to a cell whose other keys are `cfg` (task, activation known).
  std::function<bool(const json& cfg)> applies;
  // Default for a cell (null json = no default: the key is required when it applies).
  std::function<json(const json& cfg)> default_value;
};

// Every known key (cell-level). `resources` (grid-level) is separate.
const std::vector<ParamSpec>& param_specs();
const ParamSpec* find_param(const std::string& name);

// Names of implemented tasks ("norm_probe", "synthetic", ...).
std::vector<std::string> task_names();

// Rough cost of a cell in seconds on one CPU slot: the scheduler's longest-first order.
double estimate_cost_s(const json& effective_config);

}  // namespace attnsweep
