// `attnsweep aggregate DIR`: runs/*.h5 -> DIR/aggregate.h5 + DIR/summary.csv, with
// log-log fits of every norm against prompt_length per group of the other parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results/aggregate_options.h"
#include "results/best_scale.h"
#include "results/fits.h"  // Fit, fit_loglog, student_t_quantile
#include "results/paired.h"

namespace attnsweep {

struct AggregateResult {
  int64_t cells = 0;
  int64_t reread = 0;                // rows read from their cell files this time
  int64_t reused = 0;                // rows copied from the previous aggregate.h5 (unchanged files)
  int64_t forks = 0;                 // child processes forked to help (pass 1: 1; pass 2: 1 per block)
  std::vector<std::string> skipped;  // "runs/x.h5: reason"
  int64_t not_in_grid = 0;           // result files of cells the manifest's grid no longer holds, left out
  std::vector<Fit> fits;             // sorted by group, then metric
  std::vector<std::string> columns;  // the /cells (and summary.csv) columns, in order
  std::vector<PairedDiff> paired;    // /paired and paired.csv (results/paired.h)
  BestScaleResult best_scale;        // /best_scale(_fit) and best_scale.csv (results/best_scale.h)
};

// Throws std::runtime_error when DIR has no runs/ folder.
AggregateResult aggregate_dir(const std::string& dir, const AggregateOptions& opt);

}  // namespace attnsweep
