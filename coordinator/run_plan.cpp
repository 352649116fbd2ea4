#include "coordinator/run_plan.h"

#include <algorithm>
#include <cmath>

#include "kernels/device.h"
#include "worker/model/gpu_memory.h"

namespace attnsweep {
namespace {

GpuFit check_gpu_fit(const Grid& grid, const std::vector<int64_t>& cell_bytes, int cells_per_gpu, int64_t memory_bytes,
                     const std::string& source) {
  GpuFit f;
  f.cells_per_gpu = cells_per_gpu;
  f.memory_bytes = memory_bytes;
  for (size_t i = 0; i < cell_bytes.size(); ++i)
    if (cell_bytes[i] > f.cell_bytes) f.cell_bytes = cell_bytes[i], f.cell = i;
  if (memory_bytes <= 0 || f.cell_bytes == 0) return f;
  f.checked = true;
  // K x the largest, in double: no overflow for any K and size.
  f.fits = static_cast<double>(cells_per_gpu) * static_cast<double>(f.cell_bytes) <= static_cast<double>(memory_bytes);
  if (!f.fits) {
    const Cell& c = grid.cells[f.cell];
    const json& cfg = c.config;
    f.problem = grid.file + ": cell " + c.id + " (task " + cfg.value("task", std::string("?")) + ", prompt_length " +
                (cfg.contains("prompt_length") ? cfg.at("prompt_length").dump() : std::string("-")) + ") needs about " +
                format_gib(f.cell_bytes) + " of GPU memory" +
                (cells_per_gpu > 1 ? "; " + std::to_string(cells_per_gpu) + " cells per GPU need " +
                                         format_gib(static_cast<int64_t>(cells_per_gpu) * f.cell_bytes)
                                   : std::string()) +
                ", more than the " + format_gib(memory_bytes) + " of " + source + ": " +
                (memory_bytes >= f.cell_bytes
                     ? "lower cells_per_gpu (--cells-per-gpu) to at most " + std::to_string(memory_bytes / f.cell_bytes)
                     : std::string("it does not fit even alone (smaller batch, dim or "
                                   "prompt_length)"));
  }
  return f;
}

// A cell needing more devices than a rank has would wait for ever (its slots must sit on
// distinct devices: GPUs, or CPU slots). "" when every cell fits.
std::string devices_problem(const Grid& grid, const RunPlan& p, const RunPlanInputs& in) {
  if (in.devices <= 0) return "";
  for (size_t i = 0; i < grid.cells.size(); ++i)
    if (const int k = p.devices[i]; k > in.devices)
      return grid.file + ": cell " + grid.cells[i].id + " trains on devices = " + std::to_string(k) +
             ", more than the " + std::to_string(in.devices) +
             (in.device == "cuda"
                  ? std::string(" GPU") + (in.devices == 1 ? "" : "s") + " of a rank (GPUs per node)"
                  : std::string(" worker slot") + (in.devices == 1 ? "" : "s") + " of a rank (--workers)");
  return "";
}

}  // namespace

int RunPlan::group_cap(size_t i) const {
  return group_size_cap(fuse, fusion.alike(i).size(), slots);
}

RunPlan make_run_plan(const Grid& grid, const RunPlanInputs& in) {
  RunPlan p;
  for (const Cell& c : grid.cells) {
    p.cost_s.push_back(c.est_cost_s);
    p.devices.push_back(c.config.value("devices", 1));
    p.gpu_bytes.push_back(estimate_gpu_memory(c.config).total());
  }
  p.slots = static_cast<size_t>(std::max(1, in.slots));
  p.fusion = plan_fusion(grid);
  // Cells trained as one: on CPU slots up to the task's size unless told; on GPU slots only
  // when --fuse or the grid's fuse asks, until groups have run on a GPU (issue #28).
  p.fuse = in.device == "cpu" ? fuse_size(grid, in.fuse) : in.fuse > 0 ? in.fuse : std::max(1, grid.resources.fuse);
  p.groups = static_groups(p.fusion, p.fuse, p.slots);
  p.group_of.assign(grid.cells.size(), 0);
  for (size_t g = 0; g < p.groups.size(); ++g) {
    for (size_t i : p.groups[g]) p.group_of[i] = g;
    p.group_cost_s.push_back(group_cost_s(grid, p.fusion, p.groups[g]));
    p.total_cost_s += p.group_cost_s.back();
  }
  p.wall_s = estimated_wall_s(p.group_cost_s, static_cast<int>(p.slots));
  if (in.check_gpu_fit)
    p.gpu_fit = check_gpu_fit(grid, p.gpu_bytes, in.cells_per_gpu, in.gpu_memory_bytes, in.gpu_memory_source);
  else
    p.gpu_fit.cells_per_gpu = in.cells_per_gpu;
  p.problem = devices_problem(grid, p, in);
  if (p.problem.empty() && !p.gpu_fit.fits) p.problem = p.gpu_fit.problem;
  return p;
}

int64_t planned_gpu_memory(const Grid& grid, std::string* source) {
  if (grid.resources.gpu_memory_gib > 0) {
    if (source) *source = "resources.gpu_memory_gib";
    return static_cast<int64_t>(std::llround(grid.resources.gpu_memory_gib * static_cast<double>(int64_t{1} << 30)));
  }
  // The smallest visible GPU: any of them may get K cells.
  int64_t least = 0;
  int which = -1;
  for (int g = 0; g < cuda_device_count(); ++g)
    if (const int64_t m = cuda_device_memory_bytes(g); m > 0 && (least == 0 || m < least)) least = m, which = g;
  if (source && which >= 0) *source = "GPU " + std::to_string(which) + " (" + cuda_device_name(which) + ")";
  return least;
}

}  // namespace attnsweep
