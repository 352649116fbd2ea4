// The lockstep loop of a group of alike cells (worker/training/cell_group.h) over a trainer type:
// CellGroup's members on the CPU (worker/training/cell_group.cpp, Trainer) or on one CUDA device
// (worker/training/cuda_trainer.cpp, CudaTrainer). Each member is a lane with its own trainer and
// CellLoop; at each step the lanes at the same cursor of the same data take one batch,
// made by the first of them, and their read-outs' forward and backward run in one call
// (BasicModel::readout_together: kernels/readout.h on the CPU, kernels/readout_cuda.h on
// CUDA) where the backend takes them, else each lane steps alone. Either way a lane gets
// the bits it gets alone. An exception ends its lane alone, as that member's error.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "experiments/registry.h"
#include "worker/training/cell_loop.h"
#include "worker/training/trainer.h"

namespace attnsweep {

// One member of a group of alike cells, as the lockstep loop takes it: its config,
// context and data, and where its output or error goes.
struct GroupMember {
  const json* config;
  const TaskContext* ctx;
  const TrainingData* data;
  TaskOutput* out;
  std::exception_ptr* error;
};

namespace cell_group_detail {

// One member's trainer and loop (built in place: a CellLoop points into its owner).
template <class TrainerT>
struct Lane {
  const GroupMember* m;
  TrainConfig tc;
  ModelConfig mc;
  std::unique_ptr<TrainerT> tr;
  std::unique_ptr<CellLoop<TrainerT>> loop;
  std::string data_key;  // fusion_data_key: lanes with equal keys at equal cursors take the same batch
  bool active = true;
};

// Runs f for a lane; an exception ends that lane alone, as its error.
template <class TrainerT, class F>
void guarded(Lane<TrainerT>& lane, F&& f) {
  if (!lane.active) return;
  try {
    f();
  } catch (...) {
    *lane.m->error = std::current_exception();
    lane.active = false;
  }
}

// Each lane's own step on the batch.
template <class TrainerT>
void step_alone(const std::vector<Lane<TrainerT>*>& lanes, const HostBatch& b) {
  for (Lane<TrainerT>* l : lanes)
    guarded(*l, [&] {
      l->loop->after_step(l->tr->step(b.x.data(), b.y_class.data(), b.y_value.data(), l->tc.batch, l->loop->step(),
                                      l->loop->logging(), b.idx.data()));
    });
}

// One step of lanes that take the same batch: the read-out's forward and backward of all of
// them in one call, then each lane's update; or each lane's own step.
template <class TrainerT>
void step_together(const std::vector<Lane<TrainerT>*>& lanes, const HostBatch& b) {
  for (const Lane<TrainerT>* l : lanes)
    if (l->mc.head != Head::readout || l->tc.devices != 1) return step_alone(lanes, b);
  const int64_t B = lanes[0]->tc.batch;
  // Lanes that log this step collect the norms; decided before any lane steps on.
  std::vector<Lane<TrainerT>*> parts[2];
  for (Lane<TrainerT>* l : lanes)
    if (l->active) parts[l->loop->logging() ? 1 : 0].push_back(l);
  for (const bool norms : {false, true}) {
    const std::vector<Lane<TrainerT>*>& part = parts[norms ? 1 : 0];
    if (part.empty()) continue;
    // The first lane stages the batch (or has its device make it); the others read it.
    std::vector<typename TrainerT::ModelType*> models;
    std::vector<ReadoutCell> cells;
    for (Lane<TrainerT>* l : part) {
      auto& model = l->tr->model();
      cells.push_back(models.empty() ? model.readout_begin(b.x.data(), b.y_value.data(), B, true, b.idx.data())
                                     : model.readout_join(B, true));
      models.push_back(&model);
    }
    if (!TrainerT::ModelType::readout_together(models, cells, norms)) {
      step_alone(part, b);
      continue;
    }
    for (size_t k = 0; k < part.size(); ++k) {
      Lane<TrainerT>* l = part[k];
      guarded(*l, [&] {
        TrainStepResult r;
        r.fwd = l->tr->model().readout_end(cells[k], norms);
        l->tr->apply_gradients(r, l->loop->step());
        l->loop->after_step(r);
      });
    }
  }
}

}  // namespace cell_group_detail

// Trains the members in lockstep, each on the trainer make(tc, mc, data) builds for it
// (a std::unique_ptr<TrainerT>); sets each member's output or error.
template <class TrainerT, class Make>
void train_group_loop(const std::vector<GroupMember>& members, Make&& make) {
  using Lane = cell_group_detail::Lane<TrainerT>;
  using cell_group_detail::guarded;
  std::vector<std::unique_ptr<Lane>> lanes;
  for (const GroupMember& m : members) {
    auto l = std::make_unique<Lane>();
    l->m = &m;
    guarded(*l, [&] {
      l->tc = train_config_of(*m.config);
      l->mc = model_config_of(*m.config, *m.data);
      l->tr = make(l->tc, l->mc, *m.data);
      l->loop = std::make_unique<CellLoop<TrainerT>>(*l->tr, l->tc, l->mc, *m.config, *m.ctx, *m.data);
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
      cell_group_detail::step_together(same, *batch);
    }
  }
  for (auto& l : lanes) guarded(*l, [&] { *l->m->out = l->loop->finish(); });
}

}  // namespace attnsweep
