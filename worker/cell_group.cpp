#include "worker/cell_group.h"

#include <omp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "experiments/registry.h"
#include "kernels/device.h"
#include "kernels/readout.h"
#include "worker/cell_loop.h"
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

// One member's trainer and loop (built in place: a CellLoop points into its owner).
struct Lane {
  const GroupMember* m;
  TrainConfig tc;
  ModelConfig mc;
  std::unique_ptr<Trainer> tr;
  std::unique_ptr<CellLoop<Trainer>> loop;
  std::string data_key;  // fusion_data_key: lanes with equal keys at equal cursors take the same batch
  bool active = true;
};

// Runs f for a lane; an exception ends that lane alone, as its error.
template <class F>
void guarded(Lane& lane, F&& f) {
  if (!lane.active) return;
  try {
    f();
  } catch (...) {
    *lane.m->error = std::current_exception();
    lane.active = false;
  }
}

// Whether the read-out's own algebra takes these lanes' step together.
bool fused_readout(const std::vector<Lane*>& lanes) {
  if (!readout_algebra_enabled()) return false;
  for (const Lane* l : lanes)
    if (l->mc.head != Head::readout || l->tc.devices != 1) return false;
  return true;
}

// One step of lanes that take the same batch: the read-out's forward and backward of all
// of them in one call, then each lane's update; or each lane's own step.
void step_together(const std::vector<Lane*>& lanes, const HostBatch& b) {
  const int64_t B = lanes[0]->tc.batch;
  if (!fused_readout(lanes)) {
    for (Lane* l : lanes)
      guarded(*l, [&] {
        l->loop->after_step(
            l->tr->step(b.x.data(), b.y_class.data(), b.y_value.data(), B, l->loop->step(), l->loop->logging()));
      });
    return;
  }
  // Lanes that log this step collect the norms; decided before any lane steps on.
  std::vector<Lane*> parts[2];
  for (Lane* l : lanes)
    if (l->active) parts[l->loop->logging() ? 1 : 0].push_back(l);
  for (const bool norms : {false, true}) {
    const std::vector<Lane*>& part = parts[norms ? 1 : 0];
    if (part.empty()) continue;
    std::vector<ReadoutCell> cells;
    for (Lane* l : part) cells.push_back(l->tr->model().readout_begin(b.x.data(), b.y_value.data(), B, true));
    const ModelConfig& mc = part[0]->mc;
    readout_train_cpu(ReadoutShape{B, mc.tokens, mc.dim, mc.heads}, b.x.data(), b.y_value.data(), cells, norms);
    for (size_t k = 0; k < part.size(); ++k) {
      Lane* l = part[k];
      guarded(*l, [&] {
        TrainStepResult r;
        r.fwd = l->tr->model().readout_end(cells[k], norms);
        l->tr->apply_gradients(r, l->loop->step());
        l->loop->after_step(r);
      });
    }
  }
}

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
  try {
    check_alike(members);
    for (const GroupMember& m : members)
      if (cuda_device_index(m.ctx->device) >= 0)
        throw std::runtime_error("device " + m.ctx->device + ": groups of cells train on the CPU (run --fuse 1)");
  } catch (...) {
    for (const GroupMember& m : members) *m.error = std::current_exception();
    return;
  }
  const BlasOneThread blas_one_thread;  // as train_cell on the CPU
  omp_set_num_threads(members[0].ctx->threads > 0 ? members[0].ctx->threads : 1);

  std::vector<std::unique_ptr<Lane>> lanes;
  for (const GroupMember& m : members) {
    auto l = std::make_unique<Lane>();
    l->m = &m;
    guarded(*l, [&] {
      l->tc = train_config_of(*m.config);
      l->mc = model_config_of(*m.config, *m.data);
      l->tr = std::make_unique<Trainer>(l->mc, l->tc);
      l->loop = std::make_unique<CellLoop<Trainer>>(*l->tr, l->tc, l->mc, *m.config, *m.ctx, *m.data);
      l->data_key = fusion_data_key(*m.config);
    });
    lanes.push_back(std::move(l));
  }
  for (;;) {
    std::vector<Lane*> stepping;
    for (auto& l : lanes) {
      bool more = false;
      guarded(*l, [&] { more = l->loop->next(); });
      if (more) stepping.push_back(l.get());
    }
    if (stepping.empty()) break;
    // Lanes at the same cursor of the same data, in member order, take the first one's batch.
    std::vector<bool> taken(stepping.size(), false);
    for (size_t a = 0; a < stepping.size(); ++a) {
      if (taken[a]) continue;
      std::vector<Lane*> same{stepping[a]};
      for (size_t c = a + 1; c < stepping.size(); ++c)
        if (!taken[c] && stepping[c]->data_key == stepping[a]->data_key &&
            stepping[c]->loop->cursor() == stepping[a]->loop->cursor()) {
          same.push_back(stepping[c]);
          taken[c] = true;
        }
      const HostBatch* batch = nullptr;
      guarded(*same[0], [&] { batch = &same[0]->loop->take_batch(nullptr); });
      if (!batch) {  // the batch could not be made: an error of every lane that needed it
        for (Lane* l : same) {
          if (l != same[0]) *l->m->error = *same[0]->m->error;
          l->active = false;
        }
        continue;
      }
      for (size_t k = 1; k < same.size(); ++k) same[k]->loop->take_batch(batch);
      step_together(same, *batch);
    }
  }
  for (auto& l : lanes) guarded(*l, [&] { *l->m->out = l->loop->finish(); });
}

}  // namespace attnsweep
