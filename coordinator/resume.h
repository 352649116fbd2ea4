// What rank 0 does with the run directory before the first cell: lock it, check or write
// the manifest (a different grid is refused unless --force), write every cell's config,
// and find the cells whose result files are valid (they are not run again).
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "coordinator/grid.h"
#include "coordinator/run_options.h"
#include "coordinator/rundir.h"
#include "experiments/cell_status.h"

namespace attnsweep {

// Prepares the directory on rank 0: lock, manifest, cell files, finished cells.
// Returns the indices already finished (with their state). Throws InputError for a
// refused resume, std::runtime_error for I/O problems.
std::vector<std::pair<size_t, CellStatus>> prepare_dir(const Grid& grid, const RunOptions& opt, RunDir& rd);

}  // namespace attnsweep
