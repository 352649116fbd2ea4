// BasicModel over the CPU backend (the definitions: worker/model_impl.h; CUDA's:
// worker/cuda_trainer.cpp).
#include "worker/model_impl.h"

namespace attnsweep {

template class BasicModel<CpuBackend>;

}  // namespace attnsweep
