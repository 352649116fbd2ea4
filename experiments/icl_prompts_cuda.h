// icl_regression's prompts made on a CUDA device, with the CPU's bits: the normals are
// Philox4x32-10 (cuRAND's, the same function as experiments/philox.h) through the Box-Muller
// math of experiments/normals_math.h, and the tokens are made by icl_prompt_math.h, all in a
// float type that rounds every operation alone. The training prompts of a CUDA cell are then
// never made on the host nor copied (TrainingData::fill_device). Only with
// ATTNSWEEP_HAVE_CUDA; the kernels are in experiments/icl_prompts.cu.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "experiments/icl_prompt_math.h"  // kIclMaxD

namespace attnsweep {

// What a launch needs of a setup and split (experiments/icl_regression.h), by value.
struct IclPromptsCuda {
  int64_t d = 0, L = 0;
  uint64_t key = 0;  // icl_prompt_key
  float w_sd = 0, noise_sd = 0;
  float chol[kIclMaxD * kIclMaxD] = {};  // Sigma's float32 lower factor, d x d row-major
};

// Prompts idx[0, count) (idx on the device): x [count, L + 1, d + 1] and y [count] on the
// device, the same bits as icl_prompt_tokens's tokens and target. Queued on the stream.
void icl_prompts_cuda(const IclPromptsCuda& a, const int64_t* idx, int64_t count, float* x, float* y,
                      cudaStream_t stream);

// out[0, n) = philox_normals(key, stream, ...) on the device (for tests). Queued.
void philox_normals_cuda(uint64_t key, uint64_t stream_index, float* out, int64_t n, cudaStream_t stream);

}  // namespace attnsweep
