// The checkpoint codec for the CPU trainer (the definitions: worker/training/checkpoint_impl.h;
// CUDA's: worker/training/cuda_trainer.cpp).
#include "worker/training/checkpoint_impl.h"

#include "worker/training/trainer.h"

namespace attnsweep {

template void save_checkpoint(const std::string&, const std::string&, const TrainConfig&, Trainer&, const TrainState&);
template bool load_checkpoint(const std::string&, const std::string&, Trainer&, TrainState&, std::string*);

}  // namespace attnsweep
