// attnsweep: one binary, one subcommand per verb of contract.md. Thin: parsing of the
// command line here, the work in coordinator/, worker/ and results/.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <boost/program_options.hpp>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator/grid.h"
#include "coordinator/status.h"
#include "coordinator/sweep.h"
#include "coordinator/train_command.h"
#include "experiments/params.h"
#include "experiments/result_schema.h"
#include "kernels/activation.h"
#include "kernels/device.h"
#include "results/aggregate.h"
#include "slurm/submit.h"
#include "worker/cpu_env.h"
#include "worker/run_cell.h"

namespace po = boost::program_options;
using namespace attnsweep;

int cmd_attention(int argc, char** argv);  // app/cmd_attention.cpp
int cmd_report(int argc, char** argv);     // app/cmd_report.cpp

namespace {

constexpr int kExitOk = 0, kExitUsage = 2;

const char* kUsage =
    "attnsweep " ATTNSWEEP_VERSION
    ": sweeps of attention activations x prompt lengths, on MPI and Slurm\n"
    "\n"
    "usage: attnsweep COMMAND [ARGS] (attnsweep COMMAND --help for its options)\n"
    "\n"
    "  plan GRID.json [--json]           validate and expand a grid: one line per cell, then the total\n"
    "  run GRID.json --out DIR [...]     run every cell (local slots, or every rank of mpirun/srun)\n"
    "  train CELL.json --out FILE.h5     run one cell in this process (--checkpoint PATH: resumable)\n"
    "  submit GRID.json --out DIR --nodes N --gpus-per-node G [...]   write DIR/job.sbatch, sbatch it\n"
    "  status DIR [--json]               done / diverged / failed / pending, ETA\n"
    "  aggregate DIR                     DIR/aggregate.h5 + DIR/summary.csv, log-log fits\n"
    "  report DIR                        DIR/report.html: figures, final metrics, counts\n"
    "  attention IN.h5 --out OUT.h5 ...  one attention forward + backward, for checking numerics\n"
    "  activations [--json]              the attention activations phi and what each takes\n"
    "  schema                            the grid format as a JSON Schema (draft 2020-12), for editors\n"
    "  results-schema [--json]           what a cell's result file holds (docs/results-schema.md's table)\n"
    "\n"
    "exit codes: 0 finished, 1 cells failed, 2 bad usage or input, 75 interrupted (resumable)\n";

// Parses a subcommand's options; on error prints one line naming the problem, returns false.
bool parse(const std::string& cmd, int argc, char** argv, const po::options_description& desc,
           const po::positional_options_description& pos, po::variables_map& vm) {
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) return true;
    po::notify(vm);
    return true;
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    std::vector<std::string> known;
    for (const auto& o : desc.options()) known.push_back("--" + o->long_name());
    const std::string s = closest_match(name, known);
    std::fprintf(stderr, "attnsweep %s: %s: unknown option%s\n", cmd.c_str(), name.c_str(),
                 s.empty() ? "" : (" (did you mean " + s + "?)").c_str());
  } catch (const po::too_many_positional_options_error&) {
    std::fprintf(stderr, "attnsweep %s: too many arguments (see attnsweep %s --help)\n", cmd.c_str(), cmd.c_str());
  } catch (const po::error& e) {
    std::fprintf(stderr, "attnsweep %s: %s\n", cmd.c_str(), e.what());
  }
  return false;
}

bool help(const po::variables_map& vm, const char* synopsis, const po::options_description& desc) {
  if (!vm.count("help")) return false;
  std::cout << "usage: " << synopsis << "\n\n" << desc << "\n";
  return true;
}

void print_problems(const InputError& e) {
  for (const std::string& p : e.problems) std::fprintf(stderr, "%s\n", p.c_str());
}

std::string format_value(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// Worker slots per rank and threads per cell: beyond this it is a typo, not a machine.
constexpr int kMaxSlotsOrThreads = 4096;
constexpr int kMaxRetries = 100;  // as the grid's resources.retries (coordinator/grid.cpp)

bool in_range(const char* cmd, const char* option, long long v, long long lo, long long hi) {
  if (v >= lo && v <= hi) return true;
  std::fprintf(stderr, "attnsweep %s: %s: expected an integer in %lld..%lld, got %lld\n", cmd, option, lo, hi, v);
  return false;
}

// Why DIR cannot be a results directory ("" when it can): it, or a folder above it, is a file.
std::string dir_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) return "exists and is not a directory";
  for (fs::path p = fs::path(dir).parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
      break;
    }
    if (p == p.parent_path()) break;
  }
  return "";
}

// Why FILE cannot be written as a result file ("" when it can): it is a folder, or its
// folder does not exist.
std::string file_problem(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(file);
  if (fs::is_directory(p, ec)) return "is a directory, expected a file name";
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec)) return "no directory " + dir.string() + " to write it in";
  return "";
}

int cmd_plan(int argc, char** argv) {
  po::options_description desc("options");
  std::string grid_path;
  desc.add_options()("help,h", "this help")("json", "print the cells as one JSON array")(
      "grid", po::value(&grid_path)->required(), "the grid file");
  po::positional_options_description pos;
  pos.add("grid", 1);
  po::variables_map vm;
  if (!parse("plan", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep plan GRID.json [--json]", desc)) return kExitOk;
  Grid grid;
  try {
    grid = load_grid(grid_path);
  } catch (const InputError& e) {
    print_problems(e);
    return kExitUsage;
  }
  if (vm.count("json")) {
    json cells = json::array();
    for (const Cell& c : grid.cells)
      cells.push_back({{"id", c.id}, {"config", c.config}, {"est_cost_s", c.est_cost_s}});
    std::cout << json({{"name", grid.name}, {"grid_hash", grid.hash}, {"cells", cells}}).dump(2) << "\n";
    return kExitOk;
  }
  double total_cost = 0;
  for (const Cell& c : grid.cells) {
    std::string line = c.id;
    for (const auto& [k, v] : c.config.items()) line += " " + k + "=" + format_value(v);
    std::cout << line << "\n";
    total_cost += c.est_cost_s;
  }
  std::printf("%zu cells (grid %s, estimated %.0f CPU-slot seconds)\n", grid.cells.size(), grid.name.c_str(),
              total_cost);
  return kExitOk;
}

int cmd_activations(int argc, char** argv) {
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("json", "the registry as JSON (names, labels, formulas, test cases)");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("activations", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep activations [--json]", desc)) return kExitOk;
  const json reg = activation_registry_json();
  if (vm.count("json")) {
    std::cout << reg.dump(2) << "\n";
    return kExitOk;
  }
  for (const ActivationInfo& a : kActivations) {
    std::string takes;
    if (a.takes_degree) takes += " degree";
    if (a.takes_scale) takes += " scale";
    std::printf("%-8s phi(s) = %-40s takes:%s\n", a.name, a.formula, takes.empty() ? " -" : takes.c_str());
  }
  std::printf("scales: none, inv_sqrt_n (1/sqrt(N)), inv_n (1/N) or a positive number; degrees %d..%d\n", kMinDegree,
              kMaxDegree);
  return kExitOk;
}

int cmd_schema(int argc, char** argv) {
  po::options_description desc("options");
  desc.add_options()("help,h", "this help");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("schema", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep schema   (prints the grid format's JSON Schema; docs/grid-schema.json)", desc))
    return kExitOk;
  std::cout << grid_json_schema().dump(2) << "\n";
  return kExitOk;
}

int cmd_results_schema(int argc, char** argv) {
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("json", "as JSON (what the report reads)")(
      "markdown", "as a Markdown table (the default; docs/results-schema.md)");
  po::positional_options_description pos;
  po::variables_map vm;
  if (!parse("results-schema", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm,
           "attnsweep results-schema [--json|--markdown]   (what a cell's result file holds; docs/results-schema.md)",
           desc))
    return kExitOk;
  if (vm.count("json"))
    std::cout << result_schema_json().dump(2) << "\n";
  else
    std::cout << result_schema_markdown();
  return kExitOk;
}

int cmd_run(int argc, char** argv) {
  RunOptions opt;
  std::string grid_path;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("grid", po::value(&grid_path)->required(), "the grid file")(
      "out", po::value(&opt.out_dir)->required(), "results directory (created; resumed when it exists)")(
      "workers", po::value(&opt.workers), "CPU worker slots per rank (default: the machine's cores)")(
      "device", po::value(&opt.device)->default_value("auto"), "auto | cpu | cuda (auto: cuda when a GPU is visible)")(
      "threads", po::value(&opt.threads), "threads per cell (default: cores / slots)")(
      "retries", po::value(&opt.retries), "retries of a failed cell (default: the grid's resources.retries, else 2)")(
      "timeout-s", po::value(&opt.timeout_s),
      "kill an attempt after this many seconds (default: the grid's, else none)")(
      "rank-timeout-s", po::value(&opt.rank_timeout_s),
      "under mpirun/srun: a rank silent this long (no heartbeat) is lost, its cells go to other ranks and the run "
      "exits 75 at the end (default: the grid's resources.rank_timeout_s, else 180; at least 1)")(
      "backoff-s", po::value(&opt.backoff_s)->default_value(2.0), "delay before the first retry, doubling after")(
      "progress-every-s", po::value(&opt.progress_every_s)->default_value(30.0),
      "seconds between progress lines when stderr is not a terminal")(
      "no-resume", "recompute every cell, also those with a valid result")(
      "force", "resume although the grid differs from the directory's manifest");
  po::positional_options_description pos;
  pos.add("grid", 1);
  po::variables_map vm;
  if (!parse("run", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep run GRID.json --out DIR [options]", desc)) return kExitOk;
  opt.resume = !vm.count("no-resume");
  opt.force = vm.count("force") > 0;
  if (opt.device != "auto" && opt.device != "cpu" && opt.device != "cuda") {
    std::fprintf(stderr, "attnsweep run: --device: expected auto, cpu or cuda, got \"%s\"\n", opt.device.c_str());
    return kExitUsage;
  }
  if (vm.count("workers") && !in_range("run", "--workers", opt.workers, 1, kMaxSlotsOrThreads)) return kExitUsage;
  if (vm.count("threads") && !in_range("run", "--threads", opt.threads, 1, kMaxSlotsOrThreads)) return kExitUsage;
  if (vm.count("retries") && !in_range("run", "--retries", opt.retries, 0, kMaxRetries)) return kExitUsage;
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
  Grid grid;
  try {
    grid = load_grid(grid_path);
  } catch (const InputError& e) {
    print_problems(e);
    return kExitUsage;
  }
  return run_sweep(grid, opt);
}

int cmd_submit(int argc, char** argv) {
  SubmitOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("grid", po::value(&opt.grid_file)->required(), "the grid file")(
      "out", po::value(&opt.out_dir)->required(), "results directory (on a file system every node sees)")(
      "nodes", po::value(&opt.nodes)->required(), "nodes (one MPI rank each)")(
      "gpus-per-node", po::value(&opt.gpus_per_node)->required(), "GPUs per node, one worker slot each (0: CPU slots)")(
      "time", po::value(&opt.time)->default_value("24:00:00"), "wall-time limit of each job (HH:MM:SS or D-HH:MM:SS)")(
      "partition", po::value(&opt.partition), "Slurm partition")("account", po::value(&opt.account), "Slurm account")(
      "cpus-per-gpu", po::value(&opt.cpus_per_gpu)->default_value(8), "CPU cores per GPU")(
      "cpus-per-node", po::value(&opt.cpus_per_node)->default_value(0),
      "CPU slots per node with --gpus-per-node 0 (default 2)")(
      "grace-s", po::value(&opt.grace_s)->default_value(120),
      "seconds of warning before the time limit (--signal=B:USR1@grace)")(
      "mpi", po::value(&opt.mpi)->default_value("pmix"), "srun --mpi plugin")(
      "retries", po::value(&opt.retries), "retries of a failed cell (default: the grid's, else 2)")(
      "timeout-s", po::value(&opt.timeout_s), "per-attempt timeout (default: the grid's, else none)")(
      "dry-run", "write DIR/job.sbatch and stop");
  po::positional_options_description pos;
  pos.add("grid", 1);
  po::variables_map vm;
  if (!parse("submit", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm,
           "attnsweep submit GRID.json --out DIR --nodes N --gpus-per-node G [--time HH:MM:SS] [--partition P] "
           "[--account A] [--dry-run]",
           desc))
    return kExitOk;
  opt.dry_run = vm.count("dry-run") > 0;
  // Checked here as `run` checks them: the job's `run` would refuse them only once it starts.
  if (vm.count("retries") && !in_range("submit", "--retries", opt.retries, 0, kMaxRetries)) return kExitUsage;
  if (vm.count("timeout-s") && !(std::isfinite(opt.timeout_s) && opt.timeout_s > 0)) {
    std::fprintf(stderr, "attnsweep submit: --timeout-s: expected a number > 0, got %g\n", opt.timeout_s);
    return kExitUsage;
  }
  return submit(opt);
}

std::atomic<int> g_train_stop{0};
void on_train_signal(int sig) {
  g_train_stop.store(sig);
}

int cmd_train(int argc, char** argv) {
  // Runtime settings that only take effect at process start (worker/cpu_env.h): set
  // them and run this same command again, once.
  if (std::getenv("ATTNSWEEP_CPU_ENV_SET") == nullptr) {
    const auto fixes = cpu_env_fixes();
    if (!fixes.empty()) {
      for (const auto& [k, v] : fixes) ::setenv(k.c_str(), v.c_str(), 0);
      ::setenv("ATTNSWEEP_CPU_ENV_SET", "1", 1);
      ::execv("/proc/self/exe", argv - 1);  // argv - 1: main's argv ("attnsweep train ...")
      // exec failed (no /proc): carry on with the slower defaults
    }
  }
  std::string cell_path, out;
  RunCellOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("cell", po::value(&cell_path)->required(), "the cell file")(
      "out", po::value(&out)->required(), "result file to write (atomically)")(
      "device", po::value(&opt.device)->default_value("cpu"),
      "cpu | cuda | cuda:N (the first of the cell's `devices` GPUs)")(
      "threads", po::value(&opt.threads)->default_value(1), "threads")(
      "checkpoint", po::value(&opt.checkpoint), "checkpoint file: resumed from when valid, written on SIGTERM/SIGUSR1");
  po::positional_options_description pos;
  pos.add("cell", 1);
  po::variables_map vm;
  if (!parse("train", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep train CELL.json --out FILE.h5 [--device cpu|cuda[:N]] [--threads T] [--checkpoint PATH]",
           desc))
    return kExitOk;
  try {
    cuda_device_index(opt.device);
  } catch (const std::invalid_argument&) {
    std::fprintf(stderr, "attnsweep train: --device: expected cpu, cuda or cuda:N, got \"%s\"\n", opt.device.c_str());
    return kExitUsage;
  }
  if (!in_range("train", "--threads", opt.threads, 1, kMaxSlotsOrThreads)) return kExitUsage;
  for (const auto& [option, file] : {std::pair{"--out", out}, std::pair{"--checkpoint", opt.checkpoint}}) {
    if (file.empty()) continue;
    if (const std::string why = file_problem(file); !why.empty()) {
      std::fprintf(stderr, "attnsweep train: %s %s: %s\n", option, file.c_str(), why.c_str());
      return kExitUsage;
    }
  }
  json config;
  try {
    config = load_cell_config(cell_path);
  } catch (const InputError& e) {
    print_problems(e);
    return kExitUsage;
  }
  if (const char* a = std::getenv("ATTNSWEEP_ATTEMPT")) opt.attempt = std::max(1, std::atoi(a));
  struct sigaction sa {};
  sa.sa_handler = on_train_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) sigaction(sig, &sa, nullptr);
  opt.stop = &g_train_stop;
  return train_cell_to_file(cell_id(config), config, out, opt);
}

int cmd_aggregate(int argc, char** argv) {
  std::string dir;
  AggregateOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "fit-min-n", po::value(&opt.fit_min_n), "fit only cells with prompt_length >= this")(
      "fit-max-n", po::value(&opt.fit_max_n), "fit only cells with prompt_length <= this");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse("aggregate", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep aggregate DIR [--fit-min-n N] [--fit-max-n N]", desc)) return kExitOk;
  if (vm.count("fit-min-n") && !in_range("aggregate", "--fit-min-n", opt.fit_min_n, 0, INT64_MAX)) return kExitUsage;
  if (vm.count("fit-max-n") && !in_range("aggregate", "--fit-max-n", opt.fit_max_n, 0, INT64_MAX)) return kExitUsage;
  if (opt.fit_min_n > opt.fit_max_n) {
    std::fprintf(stderr, "attnsweep aggregate: --fit-min-n %lld is more than --fit-max-n %lld: no cell to fit\n",
                 static_cast<long long>(opt.fit_min_n), static_cast<long long>(opt.fit_max_n));
    return kExitUsage;
  }
  AggregateResult r;
  try {
    r = aggregate_dir(dir, opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep aggregate: %s\n", e.what());
    return kExitUsage;
  }
  for (const std::string& s : r.skipped) std::fprintf(stderr, "attnsweep aggregate: skipped %s\n", s.c_str());
  if (!r.fits.empty()) {
    // Words shared by every group (task=norm_probe, dim=64 ...) are said once, above the table.
    auto words = [](const std::string& g) {
      std::vector<std::string> w;
      std::istringstream ss(g);
      for (std::string t; ss >> t;) w.push_back(t);
      return w;
    };
    std::vector<std::string> common = words(r.fits.front().group);
    for (const Fit& f : r.fits) {
      const std::vector<std::string> w = words(f.group);
      std::erase_if(common, [&](const std::string& c) { return std::find(w.begin(), w.end(), c) == w.end(); });
    }
    std::string common_text;
    for (const std::string& c : common) common_text += (common_text.empty() ? "" : " ") + c;
    std::printf("log-log fits of each metric against prompt_length%s%s%s:\n",
                common.empty() ? "" : " (all groups: ", common_text.c_str(), common.empty() ? "" : ")");
    std::printf("%-9s %-42s %8s %8s %7s %5s %11s\n", "metric", "group", "slope", "+-95%", "r2", "cells", "N range");
    for (const Fit& f : r.fits) {
      std::string g;
      for (const std::string& w : words(f.group))
        if (std::find(common.begin(), common.end(), w) == common.end()) g += (g.empty() ? "" : " ") + w;
      char range[48];
      std::snprintf(range, sizeof range, "%lld..%lld", static_cast<long long>(f.n_min),
                    static_cast<long long>(f.n_max));
      std::printf("%-9s %-42s %8.3f %8.3f %7.4f %5lld %11s\n", f.metric.c_str(), g.empty() ? "-" : g.c_str(), f.slope,
                  f.slope_ci95, f.r2, static_cast<long long>(f.points), range);
    }
  }
  // Paired comparisons (results/paired.h): the test metrics here, every metric in paired.csv.
  bool header = false;
  for (const PairedDiff& d : r.paired) {
    if (d.metric.rfind("test_", 0) != 0) continue;
    if (!header)
      std::printf(
          "paired differences a - b over cells equal but for the activation (mean, 95%% CI):\n%-13s %6s %-36s "
          "%-36s %5s %10s %9s %s\n",
          "metric", "N", "a", "b", "pairs", "mean", "+-95%", "a lower");
    header = true;
    std::printf("%-13s %6s %-36s %-36s %5lld %10.4g %9.3g %lld/%lld\n", d.metric.c_str(),
                std::isnan(d.prompt_length) ? "-" : std::to_string(std::llround(d.prompt_length)).c_str(), d.a.c_str(),
                d.b.c_str(), static_cast<long long>(d.pairs), d.mean_diff, d.ci95, static_cast<long long>(d.a_lower),
                static_cast<long long>(d.pairs));
  }
  for (const BestScaleFit& f : r.best_scale.fits)
    std::printf(
        "best scale c*(N) by %s, log c* against log N: slope %.3f, 95%% bootstrap [%.3f, %.3f] over %lld N "
        "(paper A's 1/sqrt(N): -0.5)%s%s\n",
        f.metric.c_str(), f.slope, f.slope_lo, f.slope_hi, static_cast<long long>(f.points),
        r.best_scale.fits.size() > 2 ? ": " : "", r.best_scale.fits.size() > 2 ? f.group.c_str() : "");
  std::printf("aggregated %lld cells (%lld read, %lld unchanged)%s -> %s/aggregate.h5, %s/summary.csv%s\n",
              static_cast<long long>(r.cells), static_cast<long long>(r.reread), static_cast<long long>(r.reused),
              r.skipped.empty() ? "" : (" (" + std::to_string(r.skipped.size()) + " files skipped)").c_str(),
              dir.c_str(), dir.c_str(), r.paired.empty() ? "" : (", " + dir + "/paired.csv").c_str());
  return kExitOk;
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

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  if (cmd == "--version") {
    std::printf("attnsweep %s\n", ATTNSWEEP_VERSION);
    return kExitOk;
  }
  try {
    if (cmd == "plan") return cmd_plan(argc - 1, argv + 1);
    if (cmd == "run") return cmd_run(argc - 1, argv + 1);
    if (cmd == "train") return cmd_train(argc - 1, argv + 1);
    if (cmd == "aggregate") return cmd_aggregate(argc - 1, argv + 1);
    if (cmd == "status") return cmd_status(argc - 1, argv + 1);
    if (cmd == "submit") return cmd_submit(argc - 1, argv + 1);
    if (cmd == "attention") return cmd_attention(argc - 1, argv + 1);
    if (cmd == "report") return cmd_report(argc - 1, argv + 1);
    if (cmd == "activations") return cmd_activations(argc - 1, argv + 1);
    if (cmd == "schema") return cmd_schema(argc - 1, argv + 1);
    if (cmd == "results-schema") return cmd_results_schema(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  const std::string s = closest_match(cmd, {"plan", "run", "train", "status", "aggregate", "attention", "submit",
                                            "report", "activations", "schema", "results-schema"});
  std::fprintf(stderr, "attnsweep: %s: unknown command%s (see attnsweep --help)\n", cmd.c_str(),
               s.empty() ? "" : (" (did you mean \"" + s + "\"?)").c_str());
  return kExitUsage;
}
