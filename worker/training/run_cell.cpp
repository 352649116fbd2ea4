#include "worker/training/run_cell.h"
#include "base/options.h"

#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <filesystem>

#include "base/atomic_file.h"
#include "base/text_file.h"
#include "base/utc_time.h"
#include "experiments/result_schema.h"
#include "experiments/task.h"
#include "kernels/device.h"
#include "worker/training/progress.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

extern "C" void openblas_set_num_threads(int);

namespace attnsweep {

namespace {

// The earlier attempts' time (kAttemptTimeSuffix), none when absent or unreadable.
AttemptTime read_attempt_time(const std::string& checkpoint) {
  AttemptTime t;
  if (checkpoint.empty()) return t;
  try {
    const json j = json::parse(read_text(checkpoint + kAttemptTimeSuffix));
    t.started = j.at("started").get<std::string>();
    t.wall_seconds = j.at("wall_seconds").get<double>();
    t.attempts = j.at("attempts").get<int64_t>();
  } catch (const std::exception&) {
    return AttemptTime{};
  }
  return t;
}

// Adds this attempt (started at `started`, `seconds` long) to the earlier ones' time.
void add_attempt_time(const std::string& checkpoint, AttemptTime t, const std::string& started, double seconds) {
  if (checkpoint.empty()) return;
  if (t.started.empty()) t.started = started;
  const json j = {{"started", t.started}, {"wall_seconds", t.wall_seconds + seconds}, {"attempts", t.attempts + 1}};
  try {
    atomic_write_text(checkpoint + kAttemptTimeSuffix, j.dump() + "\n", /*durable=*/false);
  } catch (const std::exception& e) {  // the result then counts fewer attempts; no reason to fail
    std::fprintf(stderr, "attnsweep train: %s\n", e.what());
  }
}

}  // namespace

int run_cell(const std::string& cell_id, const json& config, const RunCellOptions& opt, CellResult* result) {
  const int threads = opt.threads > 0 ? opt.threads : 1;
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);

  TaskContext ctx;
  ctx.device = opt.device;
  ctx.threads = threads;
  ctx.attempt = opt.attempt;
  ctx.stop = opt.stop;
  ctx.checkpoint_path = opt.checkpoint;
  ctx.cell_id = cell_id;
  ctx.train = opt.train ? opt.train : train_cell;
  ProgressReporter progress(cell_id, opt.attempt, opt.progress);
  ctx.progress = [&progress](int64_t step, int64_t steps, double loss) { progress(step, steps, loss); };

  CellResult& res = *result;
  res = CellResult{};
  res.cell_id = cell_id;
  res.config = config;
  res.device = opt.device;
  res.started = iso_utc_now();
  // Where it ran, for the post-mortem of a sweep over many nodes.
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  res.provenance["host"] = host;
  struct FromEnv {
    const char* attr;
    options::ForeignName var;
  };
  static constexpr FromEnv kFromEnv[] = {{"slurm_job_id", "SLURM_JOB_ID"},
                                         {"slurm_restart_count", "SLURM_RESTART_COUNT"},
                                         {"cuda_visible_devices", "CUDA_VISIBLE_DEVICES"}};
  for (const FromEnv& e : kFromEnv)
    if (const char* x = options::launcher_env(e.var)) res.provenance[e.attr] = x;
  if (const int gpu = cuda_device_index(opt.device); gpu >= 0) {  // the first GPU of the cell
    res.provenance["gpu_name"] = cuda_device_name(gpu);
    res.provenance["gpu_uuid"] = cuda_device_uuid(gpu);
  }
  const AttemptTime before = read_attempt_time(opt.checkpoint);
  const auto t0 = std::chrono::steady_clock::now();
  const auto seconds = [&t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  TaskOutput out;
  try {
    out = run_task(config, ctx);
  } catch (const std::exception& e) {
    // The kind decides (base/errors.h): only a transient failure is worth another attempt,
    // which then starts from the time this one took.
    std::fprintf(stderr, "attnsweep train: cell %s failed: %s\n", cell_id.c_str(), e.what());
    if (!worth_retrying(error_kind(e))) return kExitFailedNoRetry;
    add_attempt_time(opt.checkpoint, before, res.started, seconds());
    return 1;
  }
  if (out.status == CellStatus::interrupted) {
    add_attempt_time(opt.checkpoint, before, res.started, seconds());
    const int sig = opt.stop ? opt.stop->load() : 0;
    const std::string at = out.stopped_at_step >= 0 ? " at step " + std::to_string(out.stopped_at_step) + " of " +
                                                          std::to_string(config.value("steps", int64_t{0}))
                                                    : std::string();
    std::fprintf(stderr, "attnsweep train: cell %s interrupted by signal %d (%s)%s%s%s\n", cell_id.c_str(), sig,
                 sig == SIGTERM   ? "SIGTERM"
                 : sig == SIGINT  ? "SIGINT"
                 : sig == SIGUSR1 ? "SIGUSR1"
                                  : "?",
                 at.c_str(), opt.checkpoint.empty() ? "" : "; checkpoint at ", opt.checkpoint.c_str());
    return 75;
  }
  // Only what the result schema declares reaches a file (and the docs and aggregate).
  if (const std::string why = undeclared_outputs(out, config.value("task", std::string())); !why.empty()) {
    std::fprintf(stderr, "attnsweep train: cell %s failed: %s\n", cell_id.c_str(), why.c_str());
    return 1;
  }
  res.last_attempt_wall_seconds = seconds();
  res.last_attempt_started = res.started;
  res.wall_seconds = before.wall_seconds + res.last_attempt_wall_seconds;
  res.attempts = before.attempts + 1;
  if (!before.started.empty()) res.started = before.started;
  res.finished = iso_utc_now();
  res.status = out.status;
  res.diverged_at_step = out.diverged_at_step;
  res.final_metrics = out.final_metrics;
  res.datasets = std::move(out.series);
  return 0;
}

}  // namespace attnsweep
