#include "worker/trainer.h"

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "kernels/device.h"
#include "worker/cell_loop.h"
#include "worker/checkpoint.h"
#include "worker/trainer_impl.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace attnsweep {

ModelWeights weights_of(const std::vector<TensorInfo>& tensors, const float* host_params) {
  ModelWeights w;
  for (const TensorInfo& t : tensors) w.tensors[t.name] = {host_params + t.offset, t.shape};
  return w;
}

ModelWeights weights_of(const Model& model) {
  return weights_of(model.tensors(), model.params());
}

template class BasicTrainer<CpuBackend>;

// ---- the training loop -------------------------------------------------------------

BlasOneThread::BlasOneThread() : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}
BlasOneThread::~BlasOneThread() {
  openblas_set_num_threads(saved_);
}

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

}  // namespace attnsweep
