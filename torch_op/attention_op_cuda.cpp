// The CUDA kernels of attnsweep's attention op (docs/pytorch.md): attention_forward and
// attention_backward for the CUDA dispatch key, on kernels/attention_cuda.h's fused path
// (float32 or bfloat16 inputs, float32 accumulation; the materialising path where it has
// no specialisation), on PyTorch's current stream of q's GPU. The autograd node and the
// schemas are attention_op.cpp's, for both devices.
//
// Built where PyTorch has CUDA (libc10_cuda) and attnsweep's CUDA kernels are built
// (torch_op/CMakeLists.txt); compiled, not linked, beside the emulated device in CI.
#include "kernels/attention_cuda.h"
#include "torch_op/call.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <map>
#include <memory>

namespace attnsweep {
namespace {

// A workspace (cuBLAS handle and scratch) is one stream's (kernels/attention_cuda.h): one
// per calling thread and stream, kept for the process.
AttentionCudaWorkspace* workspace_for(cudaStream_t stream) {
  struct Destroy {
    void operator()(AttentionCudaWorkspace* ws) const { attention_cuda_workspace_destroy(ws); }
  };
  thread_local std::map<cudaStream_t, std::unique_ptr<AttentionCudaWorkspace, Destroy>> ws;
  auto& w = ws[stream];
  if (!w) w.reset(attention_cuda_workspace_create());
  return w.get();
}

CudaDType dtype_of(const at::Tensor& t) {
  return t.scalar_type() == at::kBFloat16 ? CudaDType::bf16 : CudaDType::f32;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_cuda(const at::Tensor& q, const at::Tensor& k,
                                                                        const at::Tensor& v, std::string activation,
                                                                        int64_t degree, std::string scale, bool causal,
                                                                        const c10::optional<at::Tensor>& key_mask,
                                                                        c10::optional<double> score_scale) {
  const torch_op::Call c =
      torch_op::check_call(c10::DeviceType::CUDA, q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  const c10::cuda::CUDAGuard on(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  const torch_op::ForwardOutputs o = torch_op::forward_outputs(c, q);
  attention_forward_cuda(c.spec, c.shape, dtype_of(q), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                         c.mask ? c.mask->data_ptr<float>() : nullptr, o.out.data_ptr(),
                         o.has_lse() ? o.lse.data_ptr<float>() : nullptr, o.attn_fro.data_ptr<double>(),
                         o.jac_fro.data_ptr<double>(), workspace_for(stream), stream);
  return {o.out, o.lse, o.attn_fro, o.jac_fro};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cuda(const at::Tensor& grad_out, const at::Tensor& q,
                                                             const at::Tensor& k, const at::Tensor& v,
                                                             const at::Tensor& out, const at::Tensor& lse,
                                                             std::string activation, int64_t degree, std::string scale,
                                                             bool causal, const c10::optional<at::Tensor>& key_mask,
                                                             c10::optional<double> score_scale) {
  const torch_op::Call c =
      torch_op::check_call(c10::DeviceType::CUDA, q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  torch_op::check_grad_out(grad_out, out);
  const AttentionShape& sh = c.shape;
  const c10::cuda::CUDAGuard on(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  const bool softmax = c.spec.act.activation == Activation::softmax;
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  attention_backward_cuda(c.spec, sh, dtype_of(q), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                          c.mask ? c.mask->data_ptr<float>() : nullptr, out.data_ptr(), grad_out.data_ptr(),
                          softmax ? lse.data_ptr<float>() : nullptr, dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
                          workspace_for(stream), stream);
  return {dq, dk, dv};
}

}  // namespace
}  // namespace attnsweep

TORCH_LIBRARY_IMPL(attnsweep, CUDA, m) {
  m.impl("attention_forward", &attnsweep::forward_cuda);
  m.impl("attention_backward", &attnsweep::backward_cuda);
}
