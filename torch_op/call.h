// The checked call of attnsweep's attention op (docs/pytorch.md), one for its CPU and its
// CUDA kernels (attention_op.cpp, attention_op_cuda.cpp): the activation parsed, the
// tensors checked against each other and against what the kernels of their device take,
// or a c10::Error (a RuntimeError in Python) naming the argument and what was expected.
#pragma once

#include "kernels/attention.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace attnsweep::torch_op {

struct Call {
  AttentionSpec spec;
  AttentionShape shape;
  c10::optional<at::Tensor> mask;  // float32 [B,Nk], contiguous, on q's device
};

// `device`: the dispatch key's device. CPU: float32; CUDA: float32 or bfloat16 (q's type
// for k and v too), every tensor on q's GPU.
Call check_call(c10::DeviceType device, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::string& activation, int64_t degree, const std::string& scale, bool causal,
                const c10::optional<at::Tensor>& key_mask, c10::optional<double> score_scale);

// grad_out of the backward: as `out` (its shape, type and device), contiguous.
void check_grad_out(const at::Tensor& grad_out, const at::Tensor& out);

}  // namespace attnsweep::torch_op
