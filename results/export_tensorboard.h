// `attnsweep export DIR --tensorboard OUT`: every cell of a run directory as a TensorBoard
// run (docs/tensorboard.md). OUT/<label>__<cell id>/ holds one event file: every per-step
// series of the cell's result file (the trajectory groups of the result schema: /train,
// /eval, /icl, and /norms per layer and head) as scalars at their steps, its /final
// metrics as `final/<name>`, and its config as the HParams plugin's session; OUT's own
// event file holds the HParams experiment (every key and metric of the exported cells),
// so that TensorBoard's HParams view lists the grid. The same folders are what
// `wandb sync OUT` imports. The file format is results/tfevents.h.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnsweep {

// OUT (or a file in it) could not be written: exit 1, where a bad DIR is exit 2.
class ExportOutputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorboardExport {
  int64_t cells = 0;                  // cells written, one folder each
  int64_t series = 0;                 // scalar tags written over all cells
  int64_t points = 0;                 // scalar values written over all cells
  std::vector<std::string> skipped;   // "runs/x.h5: reason": files left out, as aggregate says them
  std::vector<std::string> warnings;  // "runs/x.h5: /eval/loss: ...": a series left out of a cell written
  int64_t not_in_grid = 0;            // result files of cells the manifest's grid no longer holds, left out
};

// A cell's folder name under OUT: its activation label in ASCII (s³/√N -> s3_sqrtN), or its
// task without one, then "__" and its id: "s3_sqrtN__3fa2c1d09b7e4a55". Letters, digits
// and ._=+- only.
std::string tensorboard_run_name(const std::string& label, const std::string& task, const std::string& cell_id);

// Writes OUT (made if missing). A cell's event file is written whole to a temporary and
// renamed, and replaces the event files an earlier export left in its folder. Throws
// std::runtime_error when DIR has no runs/ folder, ExportOutputError when OUT cannot be
// written. A result file that cannot be used is skipped and named, as by aggregate.
TensorboardExport export_tensorboard(const std::string& dir, const std::string& out);

}  // namespace attnsweep
