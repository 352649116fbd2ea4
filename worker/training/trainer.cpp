#include "worker/training/trainer.h"

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "worker/training/trainer_impl.h"

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

}  // namespace attnsweep
