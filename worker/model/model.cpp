// BasicModel over the CPU backend (the definitions: worker/model/model_impl.h; CUDA's:
// worker/training/cuda_trainer.cpp).
#include "worker/model/model_impl.h"

namespace attnsweep {

template class BasicModel<CpuBackend>;

}  // namespace attnsweep
