// A running cell's progress: its step, the step's loss and its rate, reported by
// `attnsweep train` every few seconds while it trains, as a line in the cell's log and
// as a small JSON file (DIR/progress/<cell_id>.json in a sweep, written atomically) that
// the coordinator reads into status.json's running cells and its ETA
// (docs/results-schema.md "status.json").
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace attnsweep {

using json = nlohmann::json;

struct CellProgress {
  std::string cell_id;
  int attempt = 1;
  int64_t step = 0;        // steps done
  int64_t steps = 0;       // the cell's steps (0: not known, a command cell without `steps`)
  int64_t first_step = 0;  // the step this attempt started from (a checkpoint's, else 0)
  double loss = 0;         // the training loss of the last step
  double steps_per_s = 0;  // this attempt's steps over its time since its first step
  std::string updated;     // "2026-11-29T16:02:11Z"
};

json to_json(const CellProgress& p);
// nullopt when the file is absent or not a progress record (a reader never fails a run).
std::optional<CellProgress> read_progress(const std::string& path);
// "attnsweep progress: cell 3fa2... step 120/3000, loss 0.5321, 12.3 steps/s": the log's
// line (not "attnsweep train: cell ...", which names a failure's cause: local_slots.h).
std::string progress_line(const CellProgress& p);
// "1200/3000", or "1200" where the steps are not known (a command cell without `steps`).
std::string step_text(int64_t step, int64_t steps);

// Reports the steps of one cell's attempt: the first time a second after its first step,
// then every kEveryS seconds. `path` "": the log line only.
class ProgressReporter {
 public:
  static constexpr double kEveryS = 5.0;
  ProgressReporter(std::string cell_id, int attempt, std::string path);
  // After each step: steps done, the cell's steps, that step's loss.
  void operator()(int64_t step, int64_t steps, double loss);

 private:
  using Clock = std::chrono::steady_clock;
  CellProgress p_;
  std::string path_;
  bool started_ = false, reported_ = false;
  Clock::time_point t_first_, t_last_;
};

}  // namespace attnsweep
