// run, submit, train, status: running a grid (local slots, mpirun/srun, a Slurm job),
// one cell, and where a run stands.
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "base/cpu_env.h"
#include "base/options.h"
#include "coordinator/grid.h"
#include "coordinator/status.h"
#include "coordinator/sweep.h"
#include "coordinator/train_command.h"
#include "kernels/device.h"
#include "slurm/submit.h"
#include "worker/training/run_cell.h"

namespace attnsweep::cli {

int cmd_run(int argc, char** argv) {
  RunOptions opt;
  std::string grid_path;
  std::vector<std::string> overrides;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("grid", po::value(&grid_path)->required(), "the grid file")(
      "overrides", po::value(&overrides)->composing(),
      "after the grid file: key=value (fixed), key=a,b (an axis), resources.key=value (docs/command-line.md)")(
      "out", po::value(&opt.out_dir)->required(), "results directory (created; resumed when it exists)")(
      "workers", po::value(&opt.workers), "CPU worker slots per rank (default: the machine's cores)")(
      "device", po::value(&opt.device)->default_value("auto"), "auto | cpu | cuda (auto: cuda when a GPU is visible)")(
      "threads", po::value(&opt.threads), "threads per cell (default: cores / slots)")(
      "retries", po::value(&opt.retries), "retries of a failed cell (default: the grid's resources.retries, else 2)")(
      "timeout-s", po::value(&opt.timeout_s),
      "kill an attempt after this many seconds (default: the grid's, else none)")(
      "cells-per-gpu", po::value(&opt.cells_per_gpu),
      "cells (child processes) sharing each GPU: GPUs x K slots per rank (default: the grid's "
      "resources.cells_per_gpu, else 1; 1..64; not with --device cpu)")(
      "fuse", po::value(&opt.fuse),
      "cells trained as one: up to K alike cells of a task that fuses share one child process on a slot, "
      "with the same results as alone (default: the grid's resources.fuse, else on CPU slots the task's: "
      "icl_regression 16, on GPU slots 1; 1..64; 1: one cell a process)")(
      "rank-timeout-s", po::value(&opt.rank_timeout_s),
      "under mpirun/srun: a rank silent this long (no heartbeat) is lost, its cells go to other ranks and the run "
      "exits 75 at the end (default: the grid's resources.rank_timeout_s, else 180; at least 1)")(
      "backoff-s", po::value(&opt.backoff_s)->default_value(2.0), "delay before the first retry, doubling after")(
      "progress-every-s", po::value(&opt.progress_every_s)->default_value(30.0),
      "seconds between progress lines when stderr is not a terminal")(
      "no-resume", "recompute every cell, also those with a valid result")(
      "force", "resume although the grid differs from the directory's manifest");
  po::positional_options_description pos;
  pos.add("grid", 1).add("overrides", -1);
  po::variables_map vm;
  if (!parse("run", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep run GRID.json [key=value | key=a,b ...] --out DIR [options]", desc)) return kExitOk;
  opt.resume = !vm.count("no-resume");
  opt.force = vm.count("force") > 0;
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda") {
    std::fprintf(stderr, "attnsweep run: --device: expected auto, cpu or cuda, got \"%s\"\n", opt.device.c_str());
    return kExitUsage;
  }
  if (vm.count("workers") && !in_range("run", "--workers", opt.workers, 1, kMaxSlotsOrThreads)) return kExitUsage;
  if (vm.count("threads") && !in_range("run", "--threads", opt.threads, 1, kMaxSlotsOrThreads)) return kExitUsage;
  if (vm.count("retries") && !in_range("run", "--retries", opt.retries, 0, kMaxRetries)) return kExitUsage;
  if (vm.count("fuse") && !in_range("run", "--fuse", opt.fuse, 1, kMaxFuse)) return kExitUsage;
  if (vm.count("cells-per-gpu")) {
    if (!in_range("run", "--cells-per-gpu", opt.cells_per_gpu, 1, kMaxCellsPerGpu)) return kExitUsage;
    if (opt.device == "cpu") {
      std::fprintf(stderr,
                   "attnsweep run: --cells-per-gpu: shares a GPU between cells, and --device cpu uses none (CPU "
                   "slots run one cell each: set their number with --workers)\n");
      return kExitUsage;
    }
  }
  if (vm.count("timeout-s") && !(std::isfinite(opt.timeout_s) && opt.timeout_s > 0)) {
    std::fprintf(stderr, "attnsweep run: --timeout-s: expected a number > 0, got %g\n", opt.timeout_s);
    return kExitUsage;
  }
  if (vm.count("rank-timeout-s") && !(std::isfinite(opt.rank_timeout_s) && opt.rank_timeout_s >= 1)) {
    std::fprintf(stderr, "attnsweep run: --rank-timeout-s: expected a number >= 1, got %g\n", opt.rank_timeout_s);
    return kExitUsage;
  }
  if (!(std::isfinite(opt.backoff_s) && opt.backoff_s >= 0)) {
    std::fprintf(stderr, "attnsweep run: --backoff-s: expected a number >= 0, got %g\n", opt.backoff_s);
    return kExitUsage;
  }
  if (!(std::isfinite(opt.progress_every_s) && opt.progress_every_s > 0)) {
    std::fprintf(stderr, "attnsweep run: --progress-every-s: expected a number > 0, got %g\n", opt.progress_every_s);
    return kExitUsage;
  }
  if (const std::string why = dir_problem(opt.out_dir); !why.empty()) {
    std::fprintf(stderr, "attnsweep run: --out %s: %s\n", opt.out_dir.c_str(), why.c_str());
    return kExitUsage;
  }
  const std::optional<Grid> loaded = load_or_report([&] { return load_grid(grid_path, overrides); });
  if (!loaded) return kExitUsage;
  const Grid& grid = *loaded;
  for (const std::string& w : grid_warnings(grid)) std::fprintf(stderr, "attnsweep run: warning: %s\n", w.c_str());
  return run_sweep(grid, opt);
}

int cmd_submit(int argc, char** argv) {
  SubmitOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("grid", po::value(&opt.grid_file)->required(), "the grid file")(
      "overrides", po::value(&opt.overrides)->composing(),
      "after the grid file: key=value (fixed), key=a,b (an axis), resources.key=value; the job runs the grid with "
      "them")("out", po::value(&opt.out_dir)->required(), "results directory (on a file system every node sees)")(
      "nodes", po::value(&opt.nodes)->required(), "nodes (one MPI rank each)")(
      "gpus-per-node", po::value(&opt.gpus_per_node)->required(), "GPUs per node, one worker slot each (0: CPU slots)")(
      "time", po::value(&opt.time)->default_value("24:00:00"), "wall-time limit of each job (HH:MM:SS or D-HH:MM:SS)")(
      "partition", po::value(&opt.partition), "Slurm partition")("account", po::value(&opt.account), "Slurm account")(
      "cpus-per-gpu", po::value(&opt.cpus_per_gpu)->default_value(8), "CPU cores per GPU")(
      "cpus-per-node", po::value(&opt.cpus_per_node), "CPU slots per node with --gpus-per-node 0 (default 2)")(
      "grace-s", po::value(&opt.grace_s)->default_value(120),
      "seconds of warning before the time limit (--signal=B:USR1@grace)")(
      "mpi", po::value(&opt.mpi)->default_value("pmix"), "srun --mpi plugin")(
      "retries", po::value(&opt.retries), "retries of a failed cell (default: the grid's, else 2)")(
      "timeout-s", po::value(&opt.timeout_s), "per-attempt timeout (default: the grid's, else none)")(
      "cells-per-gpu", po::value(&opt.cells_per_gpu),
      "cells sharing each GPU, passed to run (default: the grid's resources.cells_per_gpu, else 1; 1..64); above 1 "
      "the job starts CUDA MPS on each node where it can (docs/slurm.md)")(
      "sbatch", po::value(&opt.sbatch_options)->composing(),
      "one more sbatch option for the script, as --sbatch=--qos=high (repeatable: --mem=64G, --constraint=a100, "
      "--gres=gpu:h100:4 ...)")(
      "setup", po::value(&opt.setup_lines)->composing(),
      "a shell line the job runs before its srun, as --setup 'module load cuda' (repeatable, in order)")(
      "dry-run", "write DIR/job.sbatch and stop");
  po::positional_options_description pos;
  pos.add("grid", 1).add("overrides", -1);
  po::variables_map vm;
  if (!parse("submit", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm,
           "attnsweep submit GRID.json [key=value | key=a,b ...] --out DIR --nodes N --gpus-per-node G [--time "
           "HH:MM:SS] [--partition P] "
           "[--account A] [--sbatch=OPT ...] [--setup LINE ...] [--dry-run]",
           desc))
    return kExitOk;
  opt.dry_run = vm.count("dry-run") > 0;
  // Checked here as `run` checks them: the job's `run` would refuse them only once it starts.
  if (vm.count("retries") && !in_range("submit", "--retries", opt.retries, 0, kMaxRetries)) return kExitUsage;
  if (vm.count("cells-per-gpu") && !in_range("submit", "--cells-per-gpu", opt.cells_per_gpu, 1, kMaxCellsPerGpu))
    return kExitUsage;
  if (vm.count("timeout-s") && !(std::isfinite(opt.timeout_s) && opt.timeout_s > 0)) {
    std::fprintf(stderr, "attnsweep submit: --timeout-s: expected a number > 0, got %g\n", opt.timeout_s);
    return kExitUsage;
  }
  return submit(opt);
}

namespace {
std::atomic<int> g_train_stop{0};
void on_train_signal(int sig) {
  g_train_stop.store(sig);
}
}  // namespace

int cmd_train(int argc, char** argv) {
  // Runtime settings that only take effect at process start (base/cpu_env.h): set
  // them and run this same command again, once.
  if (!options::cpu_env_set()) {
    const auto fixes = cpu_env_fixes();
    if (!fixes.empty()) {
      for (const auto& [k, v] : fixes) ::setenv(k.c_str(), v.c_str(), 0);
      ::setenv(options::kCpuEnvSet, "1", 1);
      ::execv("/proc/self/exe", argv - 1);  // argv - 1: main's argv ("attnsweep train ...")
      // exec failed (no /proc): carry on with the slower defaults
    }
  }
  std::vector<std::string> cell_paths, outs, checkpoints, progress;
  RunCellOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("cell", po::value(&cell_paths)->required(),
                                            "the cell file; several: cells of one group, trained as one")(
      "out", po::value(&outs)->required()->multitoken(), "result file to write (atomically), one per cell")(
      "device", po::value(&opt.device)->default_value("cpu"),
      "cpu | cuda | cuda:N (the first of the cell's `devices` GPUs)")(
      "threads", po::value(&opt.threads)->default_value(1), "threads")(
      "checkpoint", po::value(&checkpoints)->multitoken(),
      "checkpoint file, one per cell: resumed from when valid, written on SIGTERM/SIGUSR1")(
      "progress", po::value(&progress)->multitoken(),
      "progress file, one per cell: step, loss and steps/s, rewritten every few seconds while it trains");
  po::positional_options_description pos;
  pos.add("cell", -1);
  po::variables_map vm;
  if (!parse("train", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm,
           "attnsweep train CELL.json [CELL.json ...] --out FILE.h5 [FILE.h5 ...] [--device cpu|cuda[:N]] "
           "[--threads T] [--checkpoint PATH [PATH ...]] [--progress PATH [PATH ...]]",
           desc))
    return kExitOk;
  try {
    cuda_device_index(opt.device);
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr, "attnsweep train: --device: expected cpu, cuda or cuda:N, got \"%s\"\n", opt.device.c_str());
    return kExitUsage;
  }
  if (!in_range("train", "--threads", opt.threads, 1, kMaxSlotsOrThreads)) return kExitUsage;
  const size_t K = cell_paths.size();
  if (outs.size() != K || (!checkpoints.empty() && checkpoints.size() != K) ||
      (!progress.empty() && progress.size() != K)) {
    std::fprintf(stderr,
                 "attnsweep train: %zu cell file%s, %zu --out, %zu --checkpoint and %zu --progress: expected one --out "
                 "per cell, and one --checkpoint and one --progress per cell or none\n",
                 K, K == 1 ? "" : "s", outs.size(), checkpoints.size(), progress.size());
    return kExitUsage;
  }
  if (checkpoints.empty()) checkpoints.assign(K, "");
  if (progress.empty()) progress.assign(K, "");
  for (size_t i = 0; i < K; ++i)
    for (const auto& [option, file] : {std::pair{"--out", outs[i]}, std::pair{"--checkpoint", checkpoints[i]},
                                       std::pair{"--progress", progress[i]}}) {
      if (file.empty()) continue;
      if (const std::string why = file_problem(file); !why.empty()) {
        std::fprintf(stderr, "attnsweep train: %s %s: %s\n", option, file.c_str(), why.c_str());
        return kExitUsage;
      }
    }
  std::vector<json> configs;
  for (const std::string& path : cell_paths) {
    const std::optional<json> loaded = load_or_report([&] { return load_cell_config(path); });
    if (!loaded) return kExitUsage;
    configs.push_back(*loaded);
  }
  if (const std::optional<int> a = options::attempt()) opt.attempt = std::max(1, *a);
  struct sigaction sa {};
  sa.sa_handler = on_train_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
  opt.stop = &g_train_stop;
  if (K == 1) {
    opt.checkpoint = checkpoints[0];
    opt.progress = progress[0];
    return train_cell_to_file(cell_id(configs[0]), configs[0], outs[0], opt);
  }
  return train_group_to_files(configs, outs, checkpoints, progress, opt);
}

int cmd_status(int argc, char** argv) {
  std::string dir;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "json", "print one JSON object");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse("status", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep status DIR [--json]", desc)) return kExitOk;
  try {
    return print_status(dir, vm.count("json") > 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep status: %s\n", e.what());
    return kExitUsage;
  }
}

}  // namespace attnsweep::cli
