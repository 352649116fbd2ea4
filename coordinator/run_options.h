// The options of `attnsweep run` (app/cmd_run.cpp), as the sweep, its local slots and
// the resume check read them. Below every file of the run (coordinator/sweep.h).
#pragma once

#include <string>

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

}  // namespace attnsweep
