// Verdicts: each claim of a grid (results/claims.h) decided from a run's summary.csv by
// one fixed rule, never by prose. The estimate's 95 % interval is a percentile bootstrap
// over units (the cells that share the claim's pairing keys): whole units are resampled,
// so every source of variation that differs between units (initialisation, data order,
// data) varies together and the pairing inside a unit is kept. Each arm of the interval
// is widened for small n (results/stats.h: small_sample_widening; with 3 units a plain
// percentile interval covers far less than 95 %). The rule:
//   supported      the interval lies where the claim says (beyond the threshold, inside
//                  the margin or the tolerance, on the trend's side of 0)
//   contradicted   the interval lies wholly where the claim says it is not
//   unresolved     the interval spans a threshold, margin or tolerance; units_needed
//                  estimates how many units would resolve it at the observed spread
//   not testable   the cells cannot decide it, with what is missing (a group without
//                  cells, one unit, a best value at the grid's edge: censored)
// `attnsweep verdict DIR` writes DIR/verdicts.csv and prints the table; `report` shows it
// first; `verdict --markdown` is what docs/results-paperA.md and docs/results-paperB.md hold.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "results/claims.h"

namespace attnsweep {

inline constexpr int kDefaultResamples = 10000;

struct Verdict {
  std::string id, kind, statement, metric;
  std::string paper;    // the paper's setting, as the claim declares it
  std::string setting;  // this run's: task, model, budget, the x values, the units
  std::string target;   // what the claim says, as a condition: "a − b > 0", "|a − b| < 0.005", "-0.5 ± 0.15"
  int64_t units = 0, cells = 0;
  double estimate = NAN, lo = NAN, hi = NAN;  // the 95 % interval the rule reads (widened for small n)
  double boot_lo = NAN, boot_hi = NAN;        // the plain percentile interval over resamples of units
  double p_a_greater = NAN;                   // difference, equivalence: share of units where a's metric is larger
  double units_needed = NAN;                  // unresolved: units that would resolve it at the observed spread
  std::string word;                           // supported, contradicted, unresolved, not testable
  std::string reason;                         // why not testable; what the estimate is
  std::string warnings;                       // one source of variation only, pooled keys, cells left out; "; "
  std::string declared;                       // when the claim was declared (before the run, or after it)
};

// One row of summary.csv: every column as text.
struct SummaryTable {
  std::vector<std::string> columns;
  std::vector<ClaimCell> rows;
};
// Decides `claims` from the complete rows of `table`. `config_keys`: the parameters among
// the columns (empty: the registry's keys, and those the claims name). Deterministic: the
// resampling generator is seeded from each claim's id.
std::vector<Verdict> decide_claims(const std::vector<Claim>& claims, const SummaryTable& table,
                                   const std::vector<std::string>& config_keys, int resamples,
                                   const std::string& declared);

// A number as the verdicts print it: signed, 4 significant digits or so; "—" when not finite.
std::string signed_number(double v);

}  // namespace attnsweep
