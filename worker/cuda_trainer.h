// The model and trainer on CUDA devices: the templates of worker/model.h and
// worker/trainer.h over CudaBackend (worker/backend_cuda.h), instantiated in
// worker/cuda_trainer.cpp. Only with ATTNSWEEP_HAVE_CUDA.
#pragma once

#ifdef ATTNSWEEP_HAVE_CUDA

#include "worker/backend_cuda.h"
#include "worker/model.h"
#include "worker/trainer.h"

namespace attnsweep {

using CudaModel = BasicModel<CudaBackend>;
using CudaTrainer = BasicTrainer<CudaBackend>;

}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
