// A key's declaration (ParamSpec): its type, range, default and when it applies, with
// the builders the tables of keys use, the checks of a value against it and the error
// texts; the keys a grid declares for its own program (DeclaredKeysScope); the
// activation keys read back (activation_spec_of). Below the task registry, whose tasks
// declare their keys with it; the tables of every key (experiments/params.h) sit above.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <vector>

#include "kernels/activation.h"

namespace attnsweep {

using json = nlohmann::json;

enum class ParamType { integer, number, string, boolean, scale };

struct ParamSpec {
  std::string name;
  ParamType type = ParamType::number;
  double min = -1e300;  // inclusive bounds for integer/number
  double max = 1e300;
  std::vector<std::string> choices;  // string: allowed values (empty = any)
  std::string description;
  // Whether the key applies to a cell whose other keys are `cfg` (task, activation known).
  std::function<bool(const json& cfg)> applies;
  // Default for a cell (null json = no default: the key is required when it applies).
  std::function<json(const json& cfg)> default_value;
  // Cross-field check of an applying key's canonical value against the whole effective
  // config (e.g. a prompt length the task cannot make): "" when fine, else the problem.
  std::function<std::string(const json& value, const json& cfg)> check;
  // Left out of the effective config (so of the cell id and the result's config) when its
  // value is the default: a key added after results existed (precision) keeps their ids,
  // so a resumed sweep does not run its finished cells again. Readers of the config take
  // the default when the key is absent.
  bool omit_at_default = false;
};

// `applies`, `default_value` and `check` see the effective config being built:
// `applies` and `default_value` only the keys resolved before theirs (cell_param_specs'
// order, so `degree` sees the resolved `activation`); `check` sees it all. An empty
// `applies` applies to every cell whose key list holds the key.

struct TaskDef;

// Keys a grid declares for its own program (the command task, experiments/command.h):
// while a scope is alive on this thread, find_param finds them (before the built-in keys
// of the same name, which do not apply to a command cell) and the keys of a task with
// TaskDef::declared_keys include them, so they are validated, defaulted and swept like
// built-in keys. Scopes nest; the innermost wins.
class DeclaredKeysScope {
 public:
  explicit DeclaredKeysScope(std::vector<ParamSpec> keys);
  ~DeclaredKeysScope();
  DeclaredKeysScope(const DeclaredKeysScope&) = delete;
  DeclaredKeysScope& operator=(const DeclaredKeysScope&) = delete;

 private:
  std::vector<ParamSpec> keys_;
  const std::vector<ParamSpec>* outer_;
};
// The keys of the innermost scope of this thread; empty when none.
const std::vector<ParamSpec>& declared_keys();

// Builders of key declarations, for the tables of the shared, training and task keys.
// make_key: any type, no range (make_key("scale", ParamType::scale, ...)).
ParamSpec make_key(std::string name, ParamType type, json default_value, std::string description);
constexpr double kNoBound = 1e300;
ParamSpec integer_key(std::string name, double min, double max, json default_value, std::string description);
ParamSpec number_key(std::string name, double min, double max, json default_value, std::string description);
ParamSpec string_key(std::string name, std::vector<std::string> choices, json default_value, std::string description);
ParamSpec boolean_key(std::string name, json default_value, std::string description);
// A seed key (init_seed, data_seed) whose default is the cell's `seed`: one seed axis
// varies the initialisation, the data order and the data together, so that replicates
// differ in every source of variation; a grid that sets the key splits them on purpose.
ParamSpec seed_following_key(std::string name, std::string description);

// What a valid value of `spec` looks like: "an integer in 1..16", "one of softmax, ...".
std::string describe_expected(const ParamSpec& spec);

// A value as an error message shows it: scalars as JSON text, "a list", "an object".
std::string describe_value(const json& value);

// Checks `value` against `spec` (type, range, choices; not `check`) and returns it in
// canonical form: integer -> int64 (3.0 becomes 3), number -> double (1 becomes 1.0),
// scale -> its name or a double. On a bad value returns null json and sets *problem,
// e.g. `expected an integer in 1..16, got 2.5`.
json canonical_value(const ParamSpec& spec, const json& value, std::string* problem);

// The candidate closest to a misspelt `word` by edit distance (Levenshtein, a swap of
// neighbouring letters counting as one edit), or "" when none is close enough
// (distance <= max(1, word length / 3)); ties go to the earlier candidate.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// The activation registry (kernels/activation.h) as JSON, for `attnsweep activations
// --json`, the report's labels and the Python tests: {"activations": [{name, label,
// formula, elementwise, takes_degree, takes_scale, bias_log_n, torch}, ...], "scales":
// [{name, label}], "degree": [min, max], "fixed_degrees": the degrees 1..n the fused
// kernels specialise (the others read it at run time), "test_specs": [{activation,
// degree, scale}]}.
json activation_registry_json();

// The activation spec of an effective cell config: its activation, degree and scale keys
// (declared above), read back by parse_activation_spec. Throws std::runtime_error with its
// message ("activation: expected softmax, ... got \"tanh\"") on a value it refuses.
ActivationSpec activation_spec_of(const json& config);

}  // namespace attnsweep
