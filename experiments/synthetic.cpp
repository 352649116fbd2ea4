// The synthetic task exercises the orchestrator: it sleeps, crashes (SIGSEGV) on its
// first `crash_attempts` attempts, hangs, or exits with a given code.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "experiments/task.h"

namespace attnsweep {

TaskOutput run_synthetic(const json& config, const TaskContext& ctx) {
  const double seconds = config.value("seconds", 0.0);
  const int crash_attempts = config.value("crash_attempts", 0);
  const bool hang = config.value("hang", false);
  const int exit_code = config.value("exit_code", 0);

  if (ctx.attempt <= crash_attempts) {
    std::signal(SIGSEGV, SIG_DFL);
    std::raise(SIGSEGV);  // a real segfault as the parent sees it: killed by signal 11
  }
  if (exit_code != 0) std::_Exit(exit_code);

  TaskOutput out;
  using clock = std::chrono::steady_clock;
  const auto end =
      clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(hang ? 1e9 : seconds));
  while (clock::now() < end) {
    if (ctx.stop_requested()) {
      out.status = CellStatus::interrupted;
      return out;
    }
    const clock::duration left = end - clock::now();
    std::this_thread::sleep_for(std::min<clock::duration>(left, std::chrono::milliseconds(20)));
  }
  out.final_metrics["seconds"] = seconds;
  out.final_metrics["attempt"] = ctx.attempt;
  return out;
}

}  // namespace attnsweep
