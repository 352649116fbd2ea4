// Paired comparisons of activations. Two cells that differ only in the activation (its
// name, and its degree and scale where it takes them) and agree on every other
// parameter, the seeds included, trained from the same initialisation on the same data:
// the difference of a final metric within such a pair removes what the initialisation
// contributes to both. Paper B's claim is about that difference (softmax against linear
// attention from the same weights), and trained risk there falls into two basins by
// initialisation, so unpaired means over a few initialisations mislead (docs/science.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/h5.h"
#include "results/table.h"

namespace attnsweep {

// One comparison: activation a against b at one point of the other parameters, over
// every pair (the replicates: seed, init_seed, any *_seed) where both have the metric.
struct PairedDiff {
  std::string metric;
  std::string group;     // the other parameters but the replicates and prompt_length, k=v in key order
  double prompt_length;  // NaN when the cells have none
  std::string a, b;      // the activations, k=v ("activation=softmax", "activation=poly degree=1 scale=inv_n")
  int64_t pairs = 0;
  double mean_a = 0, mean_b = 0;
  double mean_diff = 0, sd_diff = 0;  // of metric(a) - metric(b); sd NaN below 2 pairs
  double ci95 = 0;                    // half-width of the 95% Student-t interval of mean_diff (NaN below 2 pairs)
  int64_t a_lower = 0;                // pairs where a's metric is below b's
};

// What names a cell in the comparisons: its activation as k=v ("activation=poly degree=3
// scale=inv_sqrt_n"; "" when it has no known activation), the PairedDiff::a or b it is,
// and its group (PairedDiff::group). aggregate.h5 /cell_groups holds both per cell, so
// that the report finds a comparison's cells without formatting a value itself.
std::string paired_spec(const std::map<std::string, nlohmann::json>& params);
std::string paired_group(const std::map<std::string, nlohmann::json>& params);

// Every comparison the cells allow: a before b in the registry's order (activation id,
// then degree, then scale: none, inv_sqrt_n, inv_n, numbers). A cell whose activation
// is met twice in one pair (softmax at degree 1 and 3: softmax takes no degree) counts
// once, the first in `cells`' order. Sorted by group, prompt_length, a, b, metric.
std::vector<PairedDiff> paired_differences(const std::vector<CellRow>& cells);

// One row per PairedDiff: as CSV (DIR/paired.csv, atomically) and as aggregate.h5's
// /paired group (one dataset per column).
void write_paired(const std::string& csv_path, const std::vector<PairedDiff>& diffs);
void write_paired_group(h5::File& f, const std::vector<PairedDiff>& diffs);

}  // namespace attnsweep
