// The options of `attnsweep aggregate` (and of run's aggregate at the end): which cells
// the fits take, and how the cell files are read. Below every file of the aggregate
// (results/aggregate.h), the fits (results/fits.h) and the best scale among them.
#pragma once

#include <cstdint>
#include <string>

namespace attnsweep {

struct AggregateOptions {
  int64_t fit_min_n = 0;  // fit only cells with prompt_length in [min, max]
  int64_t fit_max_n = INT64_MAX;
  // Where aggregate.h5, summary.csv, paired.csv and best_scale.csv go ("": DIR itself;
  // another folder for a DIR that is read-only). It must exist.
  std::string out_dir;
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

}  // namespace attnsweep
