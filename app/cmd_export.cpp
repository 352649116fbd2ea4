// export: a run directory's cells in another tool's format (results/export_tensorboard.h).
#include <boost/program_options.hpp>
#include <cstdio>
#include <string>

#include "app/cli.h"
#include "results/export_tensorboard.h"
#include "results/run_manifest.h"

namespace attnsweep::cli {

int cmd_export(int argc, char** argv) {
  std::string dir, tensorboard;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "tensorboard", po::value(&tensorboard),
      "write TensorBoard event files to this folder (made if missing): one run per cell, its series as scalars, "
      "its config and final metrics in the HParams view; `wandb sync --sync-tensorboard OUT/*/` imports the "
      "folders into W&B");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse("export", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep export DIR --tensorboard OUT", desc)) return kExitOk;
  if (tensorboard.empty()) {
    std::fprintf(stderr,
                 "attnsweep export: nothing to export to: give --tensorboard OUT (see attnsweep export --help)\n");
    return kExitUsage;
  }
  TensorboardExport r;
  try {
    r = export_tensorboard(dir, tensorboard);
  } catch (const ExportOutputError& e) {
    std::fprintf(stderr, "attnsweep export: %s\n", e.what());
    return 1;  // an output that could not be written
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep export: %s\n", e.what());
    return kExitUsage;
  }
  // Said as aggregate says them: a file left out is named, and never stops the export.
  for (const std::string& s : r.skipped) std::fprintf(stderr, "attnsweep export: skipped %s\n", s.c_str());
  for (const std::string& w : r.warnings) std::fprintf(stderr, "attnsweep export: %s\n", w.c_str());
  if (r.not_in_grid > 0) std::fprintf(stderr, "attnsweep export: %s\n", not_in_grid_note(r.not_in_grid, dir).c_str());
  std::printf("exported %lld cells (%lld scalar series, %lld points)%s -> %s (tensorboard --logdir %s)\n",
              static_cast<long long>(r.cells), static_cast<long long>(r.series), static_cast<long long>(r.points),
              r.skipped.empty() ? "" : (" (" + std::to_string(r.skipped.size()) + " files skipped)").c_str(),
              tensorboard.c_str(), tensorboard.c_str());
  return kExitOk;
}

}  // namespace attnsweep::cli
