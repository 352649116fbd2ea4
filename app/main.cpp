// attnsweep: one binary, one subcommand per verb of docs/command-line.md. Thin: parsing of the
// command line in app/ (app/cli.h, one file per group of subcommands), the work in
// coordinator/, worker/ and results/.
#include <cstdio>
#include <string>

#include "app/cli.h"
#include "experiments/params.h"

using namespace attnsweep;
using namespace attnsweep::cli;

namespace {

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
    "  verdict DIR [--claims GRID.json]  each claim of the grid decided: DIR/verdicts.csv\n"
    "  report DIR                        DIR/report.html: verdicts, figures, final metrics, counts\n"
    "  export DIR --tensorboard OUT      every cell as a TensorBoard run (scalars, HParams), for W&B too\n"
    "  attention IN.h5 --out OUT.h5 ...  one attention forward + backward, for checking numerics\n"
    "  activations [--json]              the attention activations phi and what each takes\n"
    "  schema                            the grid format as a JSON Schema (draft 2020-12), for editors\n"
    "  results-schema [--json]           what a cell's result file holds (docs/results-schema.md's table)\n"
    "\n"
    "exit codes: 0 finished, 1 cells failed, 2 bad usage or input, 75 interrupted (resumable)\n";

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
    if (cmd == "verdict") return cmd_verdict(argc - 1, argv + 1);
    if (cmd == "report") return cmd_report(argc - 1, argv + 1);
    if (cmd == "export") return cmd_export(argc - 1, argv + 1);
    if (cmd == "activations") return cmd_activations(argc - 1, argv + 1);
    if (cmd == "schema") return cmd_schema(argc - 1, argv + 1);
    if (cmd == "results-schema") return cmd_results_schema(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  const std::string s = closest_match(cmd, {"plan", "run", "train", "status", "aggregate", "attention", "submit",
                                            "verdict", "report", "export", "activations", "schema", "results-schema"});
  std::fprintf(stderr, "attnsweep: %s: unknown command%s (see attnsweep --help)\n", cmd.c_str(),
               s.empty() ? "" : (" (did you mean \"" + s + "\"?)").c_str());
  return kExitUsage;
}
