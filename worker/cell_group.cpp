#include "worker/cell_group.h"

#include <omp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "experiments/registry.h"
#include "kernels/device.h"
#include "worker/cell_group_loop.h"
#include "worker/trainer.h"

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

// ---- the lockstep loop ------------------------------------------------------------------

namespace {

// Every key but the task's may_differ must agree (experiments/registry.h fusion_identity):
// the lanes are one model shape and one training schedule, stepped together.
void check_alike(const std::vector<GroupMember>& members) {
  const json& first = *members[0].config;
  const json want = fusion_identity(first);
  if (want.is_null())
    throw std::runtime_error("task " + first.value("task", std::string("?")) + " does not train cells as one group");
  for (const GroupMember& m : members) {
    const json got = fusion_identity(*m.config);
    if (got == want) continue;
    for (const auto& [k, v] : want.items())
      if (!got.contains(k) || got[k] != v)
        throw std::runtime_error("cells of a group must agree on \"" + k + "\" (may differ: the task's fusion keys)");
    throw std::runtime_error("cells of a group must have the same keys");
  }
}

}  // namespace

void train_group(const std::vector<GroupMember>& members) {
  int gpu = -1;
  try {
    check_alike(members);
    gpu = cuda_device_index(members[0].ctx->device);
    for (const GroupMember& m : members)
      if (cuda_device_index(m.ctx->device) != gpu)
        throw std::runtime_error("cells of a group train on one device, not on " + members[0].ctx->device + " and " +
                                 m.ctx->device);
    if (gpu >= 0) check_cuda_devices(members[0].ctx->device, gpu, train_config_of(*members[0].config).devices);
  } catch (...) {
    for (const GroupMember& m : members) *m.error = std::current_exception();
    return;
  }
  if (gpu >= 0) return train_group_cuda(members, gpu);
  const BlasOneThread blas_one_thread;  // as train_cell on the CPU
  omp_set_num_threads(members[0].ctx->threads > 0 ? members[0].ctx->threads : 1);
  train_group_loop<Trainer>(members, [](const TrainConfig& tc, const ModelConfig& mc, const TrainingData&) {
    return std::make_unique<Trainer>(mc, tc);
  });
}

}  // namespace attnsweep
