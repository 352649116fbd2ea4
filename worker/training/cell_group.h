// Cells trained as one: a group of alike cells (experiments/registry.h TaskFusion: they
// agree on every key but the task's may_differ) in one process, stepped in lockstep.
// Each cell keeps its own trainer, checkpoint, trajectory, evaluations and result; cells
// that draw the same data (they agree on the task's fusion.data keys) take each step's
// batch made once; the read-out's forward and backward run for all of them in one call of
// kernels/readout.h (kernels/readout_cuda.h on a GPU). None of this changes a cell's numbers: every cell gets the bits
// it gets alone (tests/unit/test_cell_group.cpp), so grouping is only a question of speed.
//
// How a group runs (worker/training/run_cell.h run_cells): each member's task runs on a thread of
// its own, as it would alone, and its ctx.train is CellGroup::train. That call waits until
// every member has called it or left (its task failed, or trains nothing); the thread that
// completes the set trains them all, then each member's call returns its own output (or
// throws its own error) and its task carries on.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <vector>

#include "experiments/task.h"

namespace attnsweep {

class CellGroup {
 public:
  explicit CellGroup(size_t members);

  // Member i's ctx.train (its config, context and data): returns member i's output once
  // the group has trained; rethrows an error of member i's training.
  TaskOutput train(size_t i, const json& config, const TaskContext& ctx, const TrainingData& data);
  // Member i will not call train (any more): its task failed or trains nothing. A no-op
  // for a member that did call it.
  void leave(size_t i);

 private:
  struct Member {
    const json* config = nullptr;
    const TaskContext* ctx = nullptr;
    const TrainingData* data = nullptr;
    bool arrived = false, left = false;
    TaskOutput out;
    std::exception_ptr error;
  };
  // With the lock held: one member fewer to wait for; true when this caller must train.
  bool one_less();
  // Trains every member that arrived (the caller completed the set), then wakes them.
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Member> members_;
  size_t waiting_for_;
  bool done_ = false;
};

}  // namespace attnsweep
