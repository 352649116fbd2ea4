// The model, trainer and checkpoint codec on CUDA devices: the templates of
// worker/model_impl.h, trainer_impl.h and checkpoint_impl.h instantiated over CudaBackend,
// and train_cell_cuda. In a build without the CUDA backend, train_cell_cuda alone, which
// says so. The one translation unit of worker/ that names the CUDA trainer.
#include "worker/cuda_trainer.h"

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "worker/trainer.h"

#ifdef ATTNSWEEP_HAVE_CUDA
#include "kernels/device.h"
#include "worker/cell_loop.h"
#include "worker/checkpoint_impl.h"
#include "worker/model_impl.h"
#include "worker/trainer_impl.h"
#endif

namespace attnsweep {

#ifdef ATTNSWEEP_HAVE_CUDA

template class BasicModel<CudaBackend>;
template class BasicTrainer<CudaBackend>;
template void save_checkpoint(const std::string&, const std::string&, const TrainConfig&, CudaTrainer&,
                              const TrainState&);
template bool load_checkpoint(const std::string&, const std::string&, CudaTrainer&, TrainState&, std::string*);

TaskOutput train_cell_cuda(const TrainConfig& tc, const ModelConfig& mc, const json& config, const TaskContext& ctx,
                           const TrainingData& data, int gpu) {
  const int visible = cuda_device_count();
  if (gpu + tc.devices > visible)
    throw std::runtime_error(
        "device " + ctx.device + " with devices = " + std::to_string(tc.devices) + " needs GPU" +
        (tc.devices == 1 ? " " + std::to_string(gpu)
                         : "s " + std::to_string(gpu) + ".." + std::to_string(gpu + tc.devices - 1)) +
        ", but " + std::to_string(visible) + " CUDA device" + (visible == 1 ? " is" : "s are") +
        " visible (CUDA_VISIBLE_DEVICES=" +
        (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset") + ")");
  TrainConfig tcg = tc;
  // Launch-free steps: opt-in until they have been checked on a GPU (issue #20).
  const char* graphs = std::getenv("ATTNSWEEP_CUDA_GRAPHS");
  tcg.cuda_graphs = graphs != nullptr && std::string(graphs) == "1";
  CudaTrainer tr(mc, tcg, gpu);
  return train_loop(tr, tcg, mc, config, ctx, data);
}

#else

TaskOutput train_cell_cuda(const TrainConfig&, const ModelConfig&, const json&, const TaskContext& ctx,
                           const TrainingData&, int) {
  throw std::runtime_error("device " + ctx.device +
                           ": this build has no CUDA backend (rebuild with nvcc available, -DATTNSWEEP_CUDA=ON), "
                           "or run the cell with --device cpu");
}

#endif

}  // namespace attnsweep
