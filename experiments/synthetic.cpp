// The synthetic task exercises the orchestrator: it sleeps, crashes (SIGSEGV) on its
// first `crash_attempts` attempts, hangs, or exits with a given code.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "experiments/registry.h"
#include "experiments/task.h"

namespace attnsweep {

TaskOutput run_synthetic(const json& config, const TaskContext& ctx) {
  const double seconds = config.at("seconds").get<double>();
  const int64_t crash_attempts = config.at("crash_attempts").get<int64_t>();
  const bool hang = config.at("hang").get<bool>();
  const int exit_code = config.at("exit_code").get<int>();

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

const TaskDef& synthetic_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "synthetic";
    d.description = "stand-in cells for scheduler tests: sleep, crash, hang or exit on request";
    d.attention = false;
    d.keys = {number_key("seconds", 0, 86400, 0.0, "how long the cell sleeps before writing its result"),
              integer_key("crash_attempts", 0, kNoBound, 0, "the cell segfaults on its first this many attempts"),
              boolean_key("hang", false, "the cell never finishes (timeout tests)"),
              integer_key("exit_code", 0, 255, 0, "exit with this code instead of writing a result (0: write it)")};
    d.cost_s = [](const json& c) { return c.at("seconds").get<double>() + 0.005; };
    d.outputs = {make_final_metric("seconds", "the seconds it slept"),
                 make_final_metric("attempt", "the attempt that finished (1 = the first)")};
    d.run = run_synthetic;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
