// `attnsweep run`: alone (K local slots) or as every rank of mpirun/srun (rank 0
// coordinates, every rank hosts slots). Each attempt of a cell is a child process.
#pragma once

#include <string>

#include "coordinator/grid.h"

namespace attnsweep {

struct RunOptions {
  std::string out_dir;
  int workers = 0;  // CPU slots per rank (0: the machine's cores)
  std::string device = "auto";
  int threads = 0;             // threads per cell (0: cores / slots)
  int retries = -1;            // -1: the grid's resources.retries, else 2
  double timeout_s = -1;       // -1: the grid's resources.timeout_s, else none
  double rank_timeout_s = -1;  // -1: the grid's resources.rank_timeout_s, else 180 s (liveness.h)
  int cells_per_gpu = 0;       // cells per GPU (0: the grid's resources.cells_per_gpu, else 1); not on CPU slots
  int fuse = 0;                // cells per group (coordinator/fusion.h; 0: the grid's resources.fuse, else the task's)
  bool resume = true;
  bool force = false;            // resume although the grid changed
  double backoff_s = 2.0;        // first retry delay, doubling
  double progress_every_s = 30;  // plain progress lines when stderr is not a terminal
};

// Returns the exit code of contract.md: 0, 1 (failed cells), 2 (bad input), 75 (signal).
int run_sweep(const Grid& grid, const RunOptions& opt);

// True when this process was started by mpirun / srun (it then initialises MPI).
bool launched_by_mpi();

}  // namespace attnsweep
