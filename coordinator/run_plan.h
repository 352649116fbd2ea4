// The run plan: what `plan` prints and `run` executes, computed once, by make_run_plan,
// from a grid and the slots it runs on. Per cell its estimated cost, devices and GPU
// memory; the fusion of alike cells (coordinator/fusion.h) and the most cells of a group
// on these slots; the groups a run forms when every cell is pending, their costs and the
// wall time on the slots; the GPU fit of K cells per GPU; and, when the grid cannot run
// on these slots, why. `plan` prints it (app/cmd_grid.cpp); `run` checks its problem on
// every rank before any cell runs and hands cells out by it (coordinator/sweep.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/fusion.h"
#include "coordinator/grid.h"

namespace attnsweep {

// The slots a grid runs on, as the plan sees them.
struct RunPlanInputs {
  std::string device = "cpu";  // the slots' kind: cpu | cuda
  int slots = 1;               // worker slots per rank
  int devices = 1;             // distinct devices per rank: GPUs (cuda), or the slots (cpu); 0: unknown, not checked
  int cells_per_gpu = 1;       // K cells sharing one GPU: the flag, else the grid's
  int fuse = 0;                // --fuse K (0: not given)
  // One GPU's memory (0: unknown: nothing is checked) and where it came from, for the
  // message ("resources.gpu_memory_gib", "GPU 0 (NVIDIA H200)"): planned_gpu_memory.
  int64_t gpu_memory_bytes = 0;
  std::string gpu_memory_source;
  bool check_gpu_fit = false;  // plan: always; run: on GPU slots
};

// Whether K cells of the grid fit in one GPU's memory: any K cells may share a GPU, so
// the cell of the largest estimate (worker/model/gpu_memory.h) times K must fit.
struct GpuFit {
  bool checked = false;  // false: no GPU memory known (or no cell uses a GPU): nothing checked
  bool fits = true;
  size_t cell = 0;           // the cell of the largest estimate
  int64_t cell_bytes = 0;    // its estimate
  int64_t memory_bytes = 0;  // one GPU's memory
  int cells_per_gpu = 1;
  std::string problem;  // when !fits: names the cell, its task and prompt length, the estimate, K, the memory
};

struct RunPlan {
  // Per cell, in grid order.
  std::vector<double> cost_s;      // estimated seconds on one CPU slot (Cell::est_cost_s)
  std::vector<int> devices;        // the devices it trains on (its `devices` key, else 1)
  std::vector<int64_t> gpu_bytes;  // its memory on each GPU it takes (0: it uses none)

  FusionPlan fusion;  // which cells are alike
  int fuse = 1;       // K, the most cells of a group (1: none): fuse_size on CPU slots; on GPU slots only when asked
  size_t slots = 1;   // worker slots per rank
  // The groups if every cell were pending (static_groups), each cell's group, and each
  // group's CPU-slot seconds (group_cost_s).
  std::vector<std::vector<size_t>> groups;
  std::vector<size_t> group_of;
  std::vector<double> group_cost_s;
  double total_cost_s = 0;  // the groups' costs summed
  double wall_s = 0;        // estimated_wall_s of the groups on the slots, idle cores

  GpuFit gpu_fit;
  // Why the grid cannot run on these slots ("" when it can): a cell needing more devices
  // than a rank has, or K cells that do not fit in one GPU's memory.
  std::string problem;

  // The most cells of a group led by cell i on these slots (group_size_cap).
  int group_cap(size_t i) const;
};

RunPlan make_run_plan(const Grid& grid, const RunPlanInputs& in);

// The memory one GPU of the grid is planned with: resources.gpu_memory_gib when given,
// else the smallest visible GPU's (0: none); *source says which.
int64_t planned_gpu_memory(const Grid& grid, std::string* source);

}  // namespace attnsweep
