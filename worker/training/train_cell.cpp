#include "worker/training/train_cell.h"

#include <omp.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "base/errors.h"
#include "experiments/registry.h"
#include "kernels/device.h"
#include "worker/training/cell_group_loop.h"
#include "worker/training/cell_loop.h"
#include "worker/training/trainer.h"

namespace attnsweep {

TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data) {
  const int gpu = cuda_device_index(ctx.device);  // throws for an unknown device name
  const TrainConfig tc = train_config_of(config);
  const ModelConfig mc = model_config_of(config, data);
  if (gpu < 0) {
    const BlasOneThread blas_one_thread;
    Trainer tr(mc, tc);
    return train_loop(tr, tc, mc, config, ctx, data);
  }
  return train_cell_cuda(tc, mc, config, ctx, data, gpu);
}

namespace {

// Every key but the task's may_differ must agree (experiments/registry.h fusion_identity):
// the lanes are one model shape and one training schedule, stepped together.
void check_alike(const std::vector<GroupMember>& members) {
  const json& first = *members[0].config;
  const json want = fusion_identity(first);
  if (want.is_null())
    throw InternalError("task " + first.value("task", std::string("?")) + " does not train cells as one group");
  for (const GroupMember& m : members) {
    const json got = fusion_identity(*m.config);
    if (got == want) continue;
    for (const auto& [k, v] : want.items())
      if (!got.contains(k) || got[k] != v)
        throw InternalError("cells of a group must agree on \"" + k + "\" (may differ: the task's fusion keys)");
    throw InternalError("cells of a group must have the same keys");
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
        throw InternalError("cells of a group train on one device, not on " + members[0].ctx->device + " and " +
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
