// Which cells of a grid may be trained as one (a group: one child process, worker/
// cell_group.h), and how a group is picked when a slot frees up. Pure: unit-tested alone.
//
// Cells are alike when their task fuses (experiments/registry.h TaskFusion) and their
// effective configs agree on every key but the task's may_differ: they then have one
// fusion key. The scheduler still hands out cells (coordinator/scheduler.h): when it picks
// one, the coordinator adds up to K - 1 pending, ready cells of the same key, those that
// draw the same data (the task's fusion.data keys) first, then in grid order.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "coordinator/grid.h"
#include "experiments/registry.h"

namespace attnsweep {

// The fusion key of a cell's effective config (a hash of experiments/registry.h
// fusion_identity): "" when its task does not fuse. Cells with equal fusion keys and
// equal fusion_data_key share every batch in a group.
std::string fusion_key(const json& config);

// K, the most cells of a group: `flag` (run --fuse, 0: not given), else the grid's
// resources.fuse, else the largest default of its tasks' (1 when none fuses).
int fuse_size(const Grid& grid, int flag);

// The fusion plan of a grid: each cell's key and data key, and the cells of each key.
struct FusionPlan {
  std::vector<std::string> key, data_key;  // per cell
  // The cells alike to cell i (its key's cells, in grid order, i among them); empty when
  // its key is "".
  std::vector<size_t> alike(size_t i) const;
  size_t groups_of_key = 0;  // distinct non-empty keys

 private:
  friend FusionPlan plan_fusion(const Grid& grid);
  std::vector<std::vector<size_t>> members_;  // per distinct key
  std::vector<size_t> key_index_;             // per cell: its key's members_ row, or npos
};
FusionPlan plan_fusion(const Grid& grid);

// The companions of `lead` for a group of at most k cells: from `candidates` (cells alike
// to lead that may run now, lead not among them), those with lead's data key first, each
// part in the order given; at most k - 1.
std::vector<size_t> pick_companions(const FusionPlan& plan, size_t lead, const std::vector<size_t>& candidates, int k);

// The most cells of a group on `slots` slots when `alike` cells share its key: k, but no
// more than the alike cells over the slots, so that a small grid spreads over the slots
// rather than queue behind one child (run's rule, coordinator/sweep.cpp).
int group_size_cap(int k, size_t alike, size_t slots);

// The groups `plan` would form if every cell were pending and nothing else ran: the cells
// of each key in grid order, cut into groups of at most group_size_cap(k, alike, slots)
// with each data key's cells together (plan's listing; the order of a run differs, the
// kind and size of group not).
std::vector<std::vector<size_t>> static_groups(const FusionPlan& plan, int k, size_t slots);

// Estimated CPU-slot seconds of one group: each cell's est_cost_s, times its task's
// fusion.added_cell_share for a cell whose data an earlier member of the group already
// draws (plan's total; a group of one is its cell). A cell with data of its own counts in
// full: 6 icl cells of 3 seeds at L = 640 took 28 s as a group and 4.8 s each alone.
double group_cost_s(const Grid& grid, const FusionPlan& plan, const std::vector<size_t>& group);

// plan's wall-time estimate: the processes' costs on `slots` slots, longest first onto the
// least loaded slot (as run hands them out), the most loaded slot's total.
double estimated_wall_s(std::vector<double> costs, int slots);

// That wall time on a machine of `cores` cores that other work keeps `others` busy (the
// load average before the run): the run's `slots` processes and the others share the
// cores, so each process gets cores / (others + slots) of one, at most a whole core.
// Measured on the 2-core Xeon VM of 2026-12-05, 13 runs of 7 grids at a one-minute load of
// 4-8 before them: 0.22-0.43 of a core a process where this rule said 0.20-0.33 (a load
// average lags and others' builds come in bursts: within 0.67-1.8x, not better).
double loaded_wall_s(double idle_wall_s, int slots, double cores, double others);

}  // namespace attnsweep
