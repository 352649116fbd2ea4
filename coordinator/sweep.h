// `attnsweep run`: alone (K local slots) or as every rank of mpirun/srun (rank 0
// coordinates, every rank hosts slots). Each attempt of a cell is a child process.
#pragma once

#include <string>

#include "coordinator/grid.h"
#include "coordinator/run_options.h"

namespace attnsweep {

// Returns the exit code of docs/command-line.md: 0, 1 (failed cells), 2 (bad input), 75 (signal).
int run_sweep(const Grid& grid, const RunOptions& opt);

// True when this process was started by mpirun / srun (it then initialises MPI).
bool launched_by_mpi();

}  // namespace attnsweep
