#include "coordinator/train_command.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "results/cell_file.h"

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
  }
  std::printf("cell %s %s in %.3f s\n", cell_id.c_str(), std::string(to_string(res.status)).c_str(), res.wall_seconds);
  return 0;
}

}  // namespace attnsweep
