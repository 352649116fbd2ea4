// Claims: what a grid says its cells will show, declared in the grid file before the run
// (its `claims` list, docs/grid-format.md#claims) and decided after it by `attnsweep
// verdict` (results/verdict.h) with one fixed rule. This file holds what a claim is, its
// parsing (every field checked, did-you-mean on names) and the cells it takes: which
// cells, grouped into units (the cells that share the pairing keys' values), so that
// `plan` can refuse a claim its grid cannot test and `verdict` can decide it.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace attnsweep {

// The kinds of claim, and what each estimates (the unit: the cells that share the values
// of `pair_by`; the estimate and its bootstrap interval resample whole units).
//   difference    mean over units of metric(a) − metric(b) (matched within a unit by the
//                 other parameters); supported when the interval clears `threshold` on
//                 `direction`'s side ("a > b": a's metric larger), contradicted when it
//                 lies wholly on the other side
//   equivalence   the same difference; supported when the interval lies inside ±margin
//                 (a two one-sided test at 2.5 % each), contradicted when wholly outside
//   difference_trend  the OLS slope over `x` (log x by default) of the units' differences
//                 a − b matched at each x; supported when its sign is `direction`'s
//                 (the gap shrinks: "decreasing" with a > b) and the interval excludes 0
//   slope         OLS slope of the metric on `x` (log-log by default) within units (each
//                 unit's mean removed); supported inside expect ± tolerance, contradicted outside
//   trend         the same slope; supported when its sign is `direction`'s
//                 (increasing / decreasing) and the interval excludes 0
//   argmax_slope  per value of `x`, the value of `over` with the best mean metric (a
//   argmin_slope  parabola in log `over` through the best and its neighbours), then the
//                 slope of log best on log x; as slope, but not testable when the best
//                 sits at the grid's edge of `over` at some x (censored)
inline constexpr const char* kClaimKinds[] = {"difference", "equivalence",  "difference_trend", "slope",
                                              "trend",      "argmax_slope", "argmin_slope"};

struct Claim {
  std::string id, statement, kind, metric;
  std::string paper;                                // the paper's setting in words (model, data, budget, N)
  nlohmann::json where = nlohmann::json::object();  // key -> value | [values]: the claim's cells
  nlohmann::json a, b;                              // difference, equivalence: the groups compared
  std::vector<std::string> pair_by;                 // the keys whose values make a unit
  std::string x, over;                              // slope, trend, arg*: the x axis; arg*: the key scanned
  bool log_x = true, log_y = true;                  // slope, trend (trend: log_y false by default)
  std::string direction;                            // difference: "a > b" | "a < b"; trend: "increasing" | "decreasing"
  double threshold = 0;                             // difference: the least difference claimed (>= 0)
  double margin = NAN;                              // equivalence
  double expect = NAN, tolerance = NAN;             // slope, arg*_slope
  nlohmann::json source;                            // the claim as declared

  bool compares_groups() const { return kind == "difference" || kind == "equivalence" || kind == "difference_trend"; }
  bool scans() const { return kind == "argmax_slope" || kind == "argmin_slope"; }
};

// The claims list of a grid. Every problem is added as (JSON path, message):
// ("claims[0].kind", "expected one of difference, ..., got \"diff\" (did you mean ...)").
std::vector<Claim> parse_claims(const nlohmann::json& list, std::vector<std::pair<std::string, std::string>>& problems);

// One cell as the claims see it: every parameter and column as text (results/table.h's
// label_value: what summary.csv holds), "" or absent where it does not apply.
struct ClaimCell {
  std::map<std::string, std::string> values;
  double metric = NAN;        // the claim's metric
  bool metric_known = false;  // false at plan time (no results yet); true: a non-finite metric leaves the cell out
  const std::string& get(const std::string& key) const;
};

// A claim's cells, taken from `cells`: those matching `where` (and a or b), by unit.
struct ClaimData {
  std::vector<std::string> unit_names;  // "seed=0 prompt_length=16", in the units' order
  // difference, equivalence: per unit, per stratum (the other parameters, as text), the
  // metrics of a's and of b's cells
  std::vector<std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>> strata;
  // slope, trend: per unit, its cells' (x, metric); arg*: per unit, (x, over, metric)
  std::vector<std::vector<std::array<double, 3>>> points;
  std::map<std::string, double> stratum_x;  // difference_trend: each stratum's value of x
  size_t cells = 0;
  std::vector<std::string> notes;   // what was left out and why, what was pooled
  std::vector<std::string> pooled;  // parameters other than the claim's that vary among its cells
  std::vector<std::string> constant_replicates, varying_replicates;  // seed keys over the units
};

// Whether `key` is a parameter of a cell (the registry's, or one the claim names): what
// units, strata and the pooled warning look at; metrics and bookkeeping columns are not.
// `config_keys`: the keys known to be parameters (a grid's cells' keys; empty: the registry's).
ClaimData claim_data(const Claim& c, const std::vector<ClaimCell>& cells, const std::vector<std::string>& config_keys);

// "" when the claim can be decided from `data` (the cells' metrics aside), else why not
// and what is missing: "group b matches no cell", "1 unit: vary seed", "x takes one value".
std::string untestable_reason(const Claim& c, const ClaimData& data);

// The keys a claim names (where, a, b, pair_by, x, over), with their JSON paths, for the
// grid's check that each is a key of some cell.
std::vector<std::pair<std::string, std::string>> claim_keys(const Claim& c, size_t index);

// The `claims` list as a JSON Schema (draft 2020-12) fragment, for `attnsweep schema`:
// every field with its type, the kinds, and each kind's required fields.
nlohmann::json claims_json_schema();

// A cell's text value as a number (summary.csv's text, results/table.h format_number);
// NaN when it is empty or not wholly a number.
double claim_number(const std::string& text);

// Whether a cell's text value matches a claim's value or list of values.
bool claim_value_matches(const nlohmann::json& want, const std::string& have);

}  // namespace attnsweep
