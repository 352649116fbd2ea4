// plan, activations, schema, results-schema: what a grid, the activations and the
// result files are, without running anything.
#include <algorithm>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "app/cli.h"
#include "coordinator/fusion.h"
#include "coordinator/grid.h"
#include "coordinator/run_plan.h"
#include "experiments/params.h"
#include "experiments/result_schema.h"
#include "kernels/activation.h"
#include "worker/model/gpu_memory.h"

namespace attnsweep::cli {

int cmd_plan(int argc, char** argv) {
  po::options_description desc("options");
  std::string grid_path;
  int cells_per_gpu = 0, fuse = 0, workers = 0;
  std::vector<std::string> overrides;
  desc.add_options()("help,h", "this help")(
      "json", "print the grid as one JSON object: name, grid_hash and cells (id, config, est_cost_s, group ...)")(
      "workers", po::value(&workers),
      "CPU slots to estimate the wall time for, as run --workers K (default: the machine's cores)")(
      "fuse", po::value(&fuse),
      "group alike cells by up to K as run --fuse K would on CPU slots (default: the grid's resources.fuse, else the "
      "task's)")(
      "cells-per-gpu", po::value(&cells_per_gpu),
      "check this many cells per GPU against its memory (default: the grid's resources.cells_per_gpu, else 1)")(
      "grid", po::value(&grid_path)->required(), "the grid file")(
      "overrides", po::value(&overrides)->composing(),
      "after the grid file: key=value (fixed), key=a,b (an axis), resources.key=value (docs/command-line.md)");
  po::positional_options_description pos;
  pos.add("grid", 1).add("overrides", -1);
  po::variables_map vm;
  if (!parse("plan", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm,
           "attnsweep plan GRID.json [key=value | key=a,b ...] [--json] [--cells-per-gpu K] [--fuse K] [--workers K]",
           desc))
    return kExitOk;
  if (vm.count("workers") && !in_range("plan", "--workers", workers, 1, kMaxSlotsOrThreads)) return kExitUsage;
  if (workers == 0) workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (vm.count("fuse") && !in_range("plan", "--fuse", fuse, 1, kMaxFuse)) return kExitUsage;
  if (vm.count("cells-per-gpu") && !in_range("plan", "--cells-per-gpu", cells_per_gpu, 1, kMaxCellsPerGpu))
    return kExitUsage;
  const std::optional<Grid> loaded = load_or_report([&] { return load_grid(grid_path, overrides); });
  if (!loaded) return kExitUsage;
  const Grid& grid = *loaded;
  for (const std::string& w : grid_warnings(grid)) std::fprintf(stderr, "attnsweep plan: warning: %s\n", w.c_str());
  // The run plan (coordinator/run_plan.h) on `workers` CPU slots, as run makes it; K cells
  // per GPU checked against one GPU's memory: the grid's gpu_memory_gib, else the visible
  // GPU's; with neither, nothing is checked (and the total line says so).
  RunPlanInputs in;
  in.slots = workers;
  in.devices = 0;  // a cell's devices are checked by run, against the rank it runs on
  in.cells_per_gpu = cells_per_gpu > 0 ? cells_per_gpu : grid.resources.cells_per_gpu;
  in.fuse = fuse;
  in.check_gpu_fit = true;
  in.gpu_memory_bytes = planned_gpu_memory(grid, &in.gpu_memory_source);
  const RunPlan plan = make_run_plan(grid, in);
  const GpuFit& fit = plan.gpu_fit;
  if (!plan.problem.empty()) {
    std::fprintf(stderr, "%s\n", plan.problem.c_str());
    return kExitUsage;
  }
  if (vm.count("json")) {
    json cells = json::array();
    for (size_t i = 0; i < grid.cells.size(); ++i) {
      const Cell& c = grid.cells[i];
      cells.push_back({{"id", c.id},
                       {"config", c.config},
                       {"est_cost_s", plan.cost_s[i]},
                       {"est_gpu_memory_bytes", plan.gpu_bytes[i]},
                       {"group", plan.group_of[i]},
                       {"group_size", plan.groups[plan.group_of[i]].size()},
                       {"fusion_key", plan.fusion.key[i].empty() ? json() : json(plan.fusion.key[i])}});
    }
    std::cout << json({{"name", grid.name}, {"grid_hash", grid.hash}, {"cells", cells}}).dump(2) << "\n";
    return kExitOk;
  }
  // The keys that tell the cells apart, per cell; the others once, above them.
  const std::vector<std::string> swept = swept_keys(grid);
  std::string header, fixed;
  for (const std::string& k : swept) header += (header.empty() ? "swept: " : ", ") + k;
  if (!grid.cells.empty())
    for (const auto& [k, v] : grid.cells[0].config.items())
      if (std::find(swept.begin(), swept.end(), k) == swept.end()) fixed += " " + k + "=" + format_value(v);
  if (!fixed.empty()) header += (header.empty() ? "" : "; ") + std::string("every cell:") + fixed;
  if (!header.empty()) std::cout << header << "\n";
  for (size_t i = 0; i < grid.cells.size(); ++i) {
    const Cell& c = grid.cells[i];
    std::string line = c.id;
    if (const std::string words = swept_text(c.config, swept); !words.empty()) line += " " + words;
    if (plan.groups[plan.group_of[i]].size() > 1) line += " group=" + std::to_string(plan.group_of[i]);
    std::cout << line << "\n";
  }
  std::string gpu;
  if (fit.checked)
    gpu = "; GPU memory: " + std::to_string(fit.cells_per_gpu) + " x " + format_gib(fit.cell_bytes) +
          " (the largest cell, " + grid.cells[fit.cell].id + ") fit in the " + format_gib(fit.memory_bytes) + " of " +
          in.gpu_memory_source;
  else if (fit.cell_bytes > 0)
    gpu = "; GPU memory not checked: no GPU visible and no resources.gpu_memory_gib (largest cell " +
          format_gib(fit.cell_bytes) + ")";
  const std::string fused = plan.groups.size() < grid.cells.size()
                                ? "; on CPU slots " + std::to_string(plan.groups.size()) +
                                      " processes, alike cells trained as one by up to " + std::to_string(plan.fuse) +
                                      " (--fuse)"
                                : "";
  // The wall time on idle cores, and at the load other work puts on this machine now.
  const double wall = plan.wall_s;
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  double load[1] = {0};
  std::string at_load;
  if (getloadavg(load, 1) == 1 && loaded_wall_s(wall, workers, cores, load[0]) > 1.1 * wall) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; about %.0f s at this machine's load now, %.1f on %.0f cores",
                  loaded_wall_s(wall, workers, cores, load[0]), load[0], cores);
    at_load = buf;
  }
  std::printf("%zu cells (grid %s, estimated %.0f CPU-slot seconds, about %.0f s of wall time on %d CPU slots%s%s%s)\n",
              grid.cells.size(), grid.name.c_str(), plan.total_cost_s, wall, workers, at_load.c_str(), fused.c_str(),
              gpu.c_str());
  // Where the figure is a guess: a program of the user's own that attnsweep cannot time.
  size_t commands = 0;
  for (const Cell& c : grid.cells) commands += c.config.value("task", "") == "command";
  if (commands > 0 && grid.resources.cost_s < 0)
    std::printf(
        "note: the %zu command cell%s count 60 s each, a guess: attnsweep cannot time your program; declare "
        "resources.cost_s (the seconds one cell takes) for a real estimate\n",
        commands, commands == 1 ? "" : "s");
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

}  // namespace attnsweep::cli
