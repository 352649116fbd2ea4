// `attnsweep submit`: validate everything, write DIR/job.sbatch from the template in
// slurm/job.sbatch.in, call sbatch, print the job id.
#pragma once

#include <string>
#include <vector>

namespace attnsweep {

struct SubmitOptions {
  std::string grid_file;
  std::vector<std::string> overrides;  // key=value words after the grid file (coordinator/grid.h)
  std::string out_dir;
  int nodes = 1;
  int gpus_per_node = 0;  // 0: CPU slots
  int cpus_per_gpu = 8;
  int cpus_per_node = 0;  // CPU jobs: cpus per node (0: 2)
  std::string time = "24:00:00";
  std::string partition, account;
  int grace_s = 120;  // --signal=B:USR1@grace
  std::string mpi = "pmix";
  int retries = -1;
  double timeout_s = -1;
  int cells_per_gpu = 0;  // 0: the grid's resources.cells_per_gpu (passed on only when given)
  // --sbatch: more sbatch options, one `#SBATCH OPT` line each (--qos=high, --mem=64G,
  // --constraint=a100, --gres=gpu:h100:4 ...); options the script itself sets are refused.
  std::vector<std::string> sbatch_options;
  // --setup: shell lines the job runs before its srun (module load ..., source venv/bin/activate).
  std::vector<std::string> setup_lines;
  bool dry_run = false;
};

// Returns the exit code (0 submitted or written, 2 bad input, 1 sbatch failed). A
// DIR/job.sbatch edited since submit wrote it (DIR/.job.sbatch.sha256) is never replaced:
// submit refuses (2) and says how to resubmit it as it is.
int submit(const SubmitOptions& opt);

// The job script for these options (no side effects), with `exe` as the binary path;
// grid_cells_per_gpu: the grid's resources.cells_per_gpu (whether the job starts CUDA
// MPS: K > 1 on GPU nodes).
std::string render_sbatch(const SubmitOptions& opt, const std::string& exe, const std::string& grid_name,
                          int grid_cells_per_gpu = 1);

}  // namespace attnsweep
