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

// What the forward returns, allocated on q's device: out [B,H,Nq,dv] of q's type; lse
// [B,H,Nq] float32 for softmax (its backward reads it), [0,H,Nq] otherwise; the norms
// ‖φ(S)‖_F and ‖∂φ/∂S‖_F [B,H] float64.
struct ForwardOutputs {
  at::Tensor out, lse, attn_fro, jac_fro;
  bool has_lse() const { return lse.numel() > 0; }
};
ForwardOutputs forward_outputs(const Call& c, const at::Tensor& q);

// grad_out of the backward: as `out` (its shape, type and device), contiguous.
void check_grad_out(const at::Tensor& grad_out, const at::Tensor& out);

}  // namespace attnsweep::torch_op
