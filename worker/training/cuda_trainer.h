// The model and trainer on CUDA devices: the templates of worker/model/model.h and
// worker/training/trainer.h over CudaBackend (worker/model/backend_cuda.h), instantiated in
// worker/training/cuda_trainer.cpp. Only with ATTNSWEEP_HAVE_CUDA.
#pragma once

#ifdef ATTNSWEEP_HAVE_CUDA

#include "worker/model/backend_cuda.h"
#include "worker/model/model.h"
#include "worker/training/trainer.h"

namespace attnsweep {

using CudaModel = BasicModel<CudaBackend>;
using CudaTrainer = BasicTrainer<CudaBackend>;

}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
