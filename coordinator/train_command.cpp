#include "coordinator/train_command.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include <thread>

#include "coordinator/grid.h"
#include "results/cell_file.h"
#include "worker/training/cell_group.h"

namespace attnsweep {

int train_cell_to_file(const std::string& cell_id, const json& config, const std::string& out_path,
                       const RunCellOptions& opt) {
  CellResult res;
  if (const int rc = run_cell(cell_id, config, opt, &res); rc != 0) return rc;
  try {
    write_cell_file(out_path, res);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep train: cell %s: cannot write %s: %s\n", cell_id.c_str(), out_path.c_str(),
                 e.what());
    return 1;
  }
  if (!opt.checkpoint.empty()) {
    std::error_code ec;  // the result is durable now: the checkpoint has done its job
    std::filesystem::remove(opt.checkpoint, ec);
    std::filesystem::remove(opt.checkpoint + kCommandMetricsSuffix, ec);  // a command cell's (experiments/command.h)
    std::filesystem::remove(opt.checkpoint + kAttemptTimeSuffix, ec);     // counted in the result now
  }
  if (!opt.progress.empty()) {
    std::error_code ec;  // a finished cell is no longer running
    std::filesystem::remove(opt.progress, ec);
  }
  std::printf("cell %s %s in %.3f s\n", cell_id.c_str(), std::string(to_string(res.status)).c_str(), res.wall_seconds);
  return 0;
}

int train_group_to_files(const std::vector<json>& configs, const std::vector<std::string>& out_paths,
                         const std::vector<std::string>& checkpoints, const std::vector<std::string>& progress,
                         const RunCellOptions& opt) {
  const size_t K = configs.size();
  CellGroup group(K);
  std::vector<int> rc(K, 1);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < K; ++i)
    threads.emplace_back([&, i] {
      RunCellOptions mine = opt;
      mine.checkpoint = checkpoints[i];
      mine.progress = progress[i];
      mine.train = [&group, i](const json& c, const TaskContext& ctx, const TrainingData& d) {
        return group.train(i, c, ctx, d);
      };
      try {
        rc[i] = train_cell_to_file(cell_id(configs[i]), configs[i], out_paths[i], mine);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "attnsweep train: cell %s failed: %s\n", cell_id(configs[i]).c_str(), e.what());
      }
      group.leave(i);  // a cell whose task ended without training: the others need not wait
    });
  for (std::thread& t : threads) t.join();
  bool interrupted = false;
  for (int r : rc) {
    if (r != 0 && r != 75) return 1;
    interrupted = interrupted || r == 75;
  }
  return interrupted ? 75 : 0;
}

}  // namespace attnsweep
