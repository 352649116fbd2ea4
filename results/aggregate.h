// `attnsweep aggregate DIR`: runs/*.h5 -> DIR/aggregate.h5 + DIR/summary.csv, with
// log-log fits of every norm against prompt_length per group of the other parameters.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results/best_scale.h"
#include "results/fits.h"  // Fit, fit_loglog, student_t_quantile
#include "results/paired.h"

namespace attnsweep {

struct AggregateOptions {
  int64_t fit_min_n = 0;  // fit only cells with prompt_length in [min, max]
  int64_t fit_max_n = INT64_MAX;
  // Reuse the rows of files unchanged (same size and mtime) since the previous
  // aggregate.h5 (its /index) instead of reopening them.
  bool reuse_previous = true;
  // Changed files are read by two processes (a forked child verifies pass 1's checksums
  // ahead of it, and reads some files of each block of pass 2) when there are at least
  // this many (in pass 2: in the block): -1 picks 16 on a machine with at least 2 CPUs,
  // else never; 0 never. Tests set 1.
  int64_t fork_min_rows = -1;
  // Rows per block of pass 2; 0: as many as fit in about 64 MiB. Tests set a few.
  int64_t block_rows = 0;
  // Tests only: 1 leaves all the forked children's work to them (pass 1 waits for its
  // child's checksums; in pass 2 the parent reads only the files its child did not); 2
  // does too, and each child kills itself (SIGKILL) after its first file. 0: both
  // processes work as they go.
  int test_reader = 0;
};

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
