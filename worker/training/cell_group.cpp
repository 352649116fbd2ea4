#include "worker/training/cell_group.h"

#include <memory>
#include <stdexcept>
#include <string>

#include "worker/training/cell_group_loop.h"
#include "worker/training/train_cell.h"

namespace attnsweep {

// ---- the rendezvous -------------------------------------------------------------------

CellGroup::CellGroup(size_t members) : members_(members), waiting_for_(members) {}

bool CellGroup::one_less() {
  --waiting_for_;
  return waiting_for_ == 0;
}

TaskOutput CellGroup::train(size_t i, const json& config, const TaskContext& ctx, const TrainingData& data) {
  bool last = false;
  {
    std::unique_lock lock(mu_);
    Member& m = members_.at(i);
    if (m.arrived || m.left) throw std::logic_error("a cell of a group trains once");
    m.config = &config;
    m.ctx = &ctx;
    m.data = &data;
    m.arrived = true;
    last = one_less();
  }
  if (last) run();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return done_; });
  Member& m = members_[i];
  if (m.error) std::rethrow_exception(m.error);
  return std::move(m.out);
}

void CellGroup::leave(size_t i) {
  bool last = false;
  {
    std::unique_lock lock(mu_);
    Member& m = members_.at(i);
    if (m.arrived || m.left) return;
    m.left = true;
    last = one_less();
  }
  if (last) run();
}

void CellGroup::run() {
  std::vector<GroupMember> arrived;
  for (Member& m : members_)
    if (m.arrived) arrived.push_back({m.config, m.ctx, m.data, &m.out, &m.error});
  // The members wait on done_ only after they arrived, and nothing else touches them:
  // no lock is needed while they train.
  if (!arrived.empty()) train_group(arrived);
  std::unique_lock lock(mu_);
  done_ = true;
  cv_.notify_all();
}

}  // namespace attnsweep
