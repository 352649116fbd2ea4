// The model, trainer and checkpoint codec on CUDA devices: the templates of
// worker/model/model_impl.h, trainer_impl.h and checkpoint_impl.h instantiated over CudaBackend,
// train_cell_cuda and train_group_cuda (worker/training/cell_group_loop.h on a CUDA device). In a
// build without the CUDA backend, those alone, which say so. The one translation unit of
// worker/ that names the CUDA trainer.
#include "worker/training/cuda_trainer.h"
#include "base/options.h"

#include <cstdlib>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "worker/training/cell_group_loop.h"  // GroupMember
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

#ifdef ATTNSWEEP_HAVE_CUDA
#include "kernels/device.h"
#include "worker/model/model_impl.h"
#include "worker/training/cell_loop.h"
#include "worker/training/checkpoint_impl.h"
#include "worker/training/trainer_impl.h"
#endif

namespace attnsweep {

#ifdef ATTNSWEEP_HAVE_CUDA

template class BasicModel<CudaBackend>;
template class BasicTrainer<CudaBackend>;
template void save_checkpoint(const std::string&, const std::string&, const TrainConfig&, CudaTrainer&,
                              const TrainState&);
template bool load_checkpoint(const std::string&, const std::string&, CudaTrainer&, TrainState&, std::string*);

namespace {
std::string visible_devices_text() {
  const char* v = options::launcher_env("CUDA_VISIBLE_DEVICES");
  return v != nullptr ? v : "unset";
}
}  // namespace

void check_cuda_devices(const std::string& device, int gpu, int64_t devices) {
  const int visible = cuda_device_count();
  if (gpu + devices > visible)
    throw std::runtime_error("device " + device + " with devices = " + std::to_string(devices) + " needs GPU" +
                             (devices == 1 ? " " + std::to_string(gpu)
                                           : "s " + std::to_string(gpu) + ".." + std::to_string(gpu + devices - 1)) +
                             ", but " + std::to_string(visible) + " CUDA device" + (visible == 1 ? " is" : "s are") +
                             " visible (CUDA_VISIBLE_DEVICES=" + visible_devices_text() + ")");
}

namespace {

// A cell's CUDA trainer on GPU gpu, with the switches of what has not run on a GPU yet.
std::unique_ptr<CudaTrainer> make_cuda_trainer(const TrainConfig& tc, const ModelConfig& mc, const TrainingData& data,
                                               int gpu) {
  TrainConfig tcg = tc;
  // Launch-free steps: opt-in until they have been checked on a GPU (issue #20).
  tcg.cuda_graphs = options::cuda_graphs();
  auto tr = std::make_unique<CudaTrainer>(mc, tcg, gpu);
  // Training batches made on the device where the task can (TrainingData::fill_device):
  // opt-in, as the graphs, until they have been checked on a GPU (issue #28).
  if (data.fill_device && options::cuda_device_batches())
    for (int64_t r = 0; r < tr->devices(); ++r) tr->replica(r).backend().set_batch_fill(data.fill_device);
  return tr;
}

}  // namespace

TaskOutput train_cell_cuda(const TrainConfig& tc, const ModelConfig& mc, const json& config, const TaskContext& ctx,
                           const TrainingData& data, int gpu) {
  check_cuda_devices(ctx.device, gpu, tc.devices);
  const std::unique_ptr<CudaTrainer> tr = make_cuda_trainer(tc, mc, data, gpu);
  return train_loop(*tr, tr->config(), mc, config, ctx, data);
}

void train_group_cuda(const std::vector<GroupMember>& members, int gpu) {
  train_group_loop<CudaTrainer>(members, [gpu](const TrainConfig& tc, const ModelConfig& mc, const TrainingData& data) {
    return make_cuda_trainer(tc, mc, data, gpu);
  });
}

#else

namespace {
std::string no_cuda(const std::string& device) {
  return "device " + device +
         ": this build has no CUDA backend (rebuild with nvcc available, -DATTNSWEEP_CUDA=ON), or run the cell with "
         "--device cpu";
}
}  // namespace

void check_cuda_devices(const std::string& device, int, int64_t) {
  throw std::runtime_error(no_cuda(device));
}

TaskOutput train_cell_cuda(const TrainConfig&, const ModelConfig&, const json&, const TaskContext& ctx,
                           const TrainingData&, int) {
  throw std::runtime_error(no_cuda(ctx.device));
}

void train_group_cuda(const std::vector<GroupMember>& members, int) {
  for (const GroupMember& m : members) *m.error = std::make_exception_ptr(std::runtime_error(no_cuda(m.ctx->device)));
}

#endif

}  // namespace attnsweep
