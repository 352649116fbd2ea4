// The arguments of the read-out in its own algebra (kernels/readout.h on the CPU,
// kernels/readout_cuda.h on CUDA), apart so that the CUDA sources (C++17, no <span>)
// read the same two structs.
#pragma once

#include <cstdint>

#include "kernels/activation.h"

namespace attnsweep {

struct ReadoutShape {
  int64_t B = 1;  // prompts
  int64_t N = 2;  // tokens a prompt: L keys, then the query
  int64_t C = 1;  // token width (d + 1)
  int64_t H = 1;  // heads, dividing C
};

// One cell of a call: its weights in, its results out. On CUDA every pointer is a device
// pointer (the struct itself stays on the host).
struct ReadoutCell {
  const float* qkv_w = nullptr;  // (3C, C): rows [0, C) Q, [C, 2C) K, [2C, 3C) V
  ActivationSpec act;
  float* pred = nullptr;       // [B] out (may be null)
  float* grad = nullptr;       // (3C, C) OVERWRITTEN by the training call
  double* attn_fro = nullptr;  // [B, H] out when norms (else may be null)
  double* jac_fro = nullptr;   // [B, H]
  double loss = 0;             // out: mean over the batch of (pred - y)^2, float64
};

}  // namespace attnsweep
