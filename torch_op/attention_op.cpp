// attnsweep's attention as a PyTorch op (docs/pytorch.md):
//   torch.ops.attnsweep.attention(q, k, v, activation, degree=1, scale="none", causal=False,
//                                 key_mask=None, score_scale=None) -> (out, attn_fro, jac_fro)
// phi(score_scale Q K^T) V for every activation of the registry (kernels/activation.h) on
// the CPU kernels of kernels/attention.h, with the per-(batch item, head) norms
// ||phi(S)||_F and ||d phi/dS||_F from the same pass and no [Nq, Nk] tensor. Autograd goes
// through attnsweep's own backward; the norms are outputs without a gradient.
//
// Two ops do the work (registered for the CPU key here, the CUDA key in
// attention_op_cuda.cpp): attention_forward (out, lse, attn_fro, jac_fro) and
// attention_backward (dq, dk, dv). `attention` ties them into one autograd node (a torch::autograd::Function) and is
// registered as CompositeImplicitAutograd, so that it records its node whatever the inputs' key.
//
// The CPU kernels take float32 only (float64 is refused, naming the dtype); the CUDA ones
// (attention_op_cuda.cpp, where built) float32 or bfloat16. Contiguous [B,H,N,d] tensors
// only (a transposed view is refused rather than copied behind the caller's back);
// key_mask [B,Nk], bool or float32 0/1. torch_op/call.h checks a call.
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "torch_op/call.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attnsweep {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using torch_op::Call;
using torch_op::check_call;
using torch_op::check_grad_out;

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_cpu(const at::Tensor& q, const at::Tensor& k,
                                                                       const at::Tensor& v, std::string activation,
                                                                       int64_t degree, std::string scale, bool causal,
                                                                       const c10::optional<at::Tensor>& key_mask,
                                                                       c10::optional<double> score_scale) {
  const Call c = check_call(c10::DeviceType::CPU, q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  const torch_op::ForwardOutputs o = torch_op::forward_outputs(c, q);
  attention_forward_cpu(c.spec, c.shape, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                        c.mask ? c.mask->data_ptr<float>() : nullptr, o.out.data_ptr<float>(),
                        o.has_lse() ? o.lse.data_ptr<float>() : nullptr, o.attn_fro.data_ptr<double>(),
                        o.jac_fro.data_ptr<double>());
  return {o.out, o.lse, o.attn_fro, o.jac_fro};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& q,
                                                            const at::Tensor& k, const at::Tensor& v,
                                                            const at::Tensor& out, const at::Tensor& lse,
                                                            std::string activation, int64_t degree, std::string scale,
                                                            bool causal, const c10::optional<at::Tensor>& key_mask,
                                                            c10::optional<double> score_scale) {
  const Call c = check_call(c10::DeviceType::CPU, q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  const AttentionShape& sh = c.shape;
  check_grad_out(grad_out, out);
  const bool softmax = c.spec.act.activation == Activation::softmax;
  at::Tensor dq = at::empty_like(q), dk = at::empty_like(k), dv = at::empty_like(v);
  attention_backward_cpu(c.spec, sh, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                         c.mask ? c.mask->data_ptr<float>() : nullptr, out.data_ptr<float>(),
                         grad_out.data_ptr<float>(), softmax ? lse.data_ptr<float>() : nullptr, dq.data_ptr<float>(),
                         dk.data_ptr<float>(), dv.data_ptr<float>());
  return {dq, dk, dv};
}

// The autograd node: the forward op's out and norms; the backward op from what it saved.
class AttentionFunction : public torch::autograd::Function<AttentionFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                               const std::string& activation, int64_t degree, const std::string& scale, bool causal,
                               const c10::optional<at::Tensor>& key_mask, c10::optional<double> score_scale) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("attnsweep::attention_forward", "")
                               .typed<decltype(forward_cpu)>();
    // A bool mask as float32 once, here: the forward and backward ops take it as it is.
    c10::optional<at::Tensor> mask = key_mask;
    if (mask && mask->defined() && mask->scalar_type() == at::kBool) mask = mask->to(at::kFloat).contiguous();
    auto [out, lse, attn, jac] = op.call(q, k, v, activation, degree, scale, causal, mask, score_scale);
    ctx->save_for_backward({q, k, v, out, lse, mask.value_or(at::Tensor())});
    ctx->saved_data["activation"] = activation;
    ctx->saved_data["degree"] = degree;
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["score_scale"] = score_scale.has_value() ? *score_scale : 0.0;
    ctx->mark_non_differentiable({attn, jac});
    return {out, attn, jac};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("attnsweep::attention_backward", "")
                               .typed<decltype(backward_cpu)>();
    const variable_list s = ctx->get_saved_variables();
    const double ss = ctx->saved_data["score_scale"].toDouble();
    // Its gradients are computed by a kernel, not by differentiable ops: a second
    // derivative through them would be silently zero, so create_graph=True is refused.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "attnsweep.attention: double backward (create_graph=True through this op) is not supported");
    variable_list result(9);                 // one per forward argument; only q, k, v have a gradient
    if (!grads[0].defined()) return result;  // only the norms were used: no gradient
    const c10::optional<at::Tensor> mask = s[5].defined() ? c10::optional<at::Tensor>(s[5]) : c10::nullopt;
    auto [dq, dk, dv] =
        op.call(grads[0].contiguous(), s[0], s[1], s[2], s[3], s[4], ctx->saved_data["activation"].toStringRef(),
                ctx->saved_data["degree"].toInt(), ctx->saved_data["scale"].toStringRef(),
                ctx->saved_data["causal"].toBool(), mask, ss > 0 ? c10::optional<double>(ss) : c10::nullopt);
    result[0] = dq, result[1] = dk, result[2] = dv;
    return result;
  }
};

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                         std::string activation, int64_t degree, std::string scale,
                                                         bool causal, const c10::optional<at::Tensor>& key_mask,
                                                         c10::optional<double> score_scale) {
  // A bad call throws in the forward op, before autograd has recorded anything.
  variable_list r = AttentionFunction::apply(q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  return {r[0], r[1], r[2]};
}

// The registry's test cases, "activation:degree:scale" each, so that the op's tests cover
// every activation without edits (tests/integration/torch_op.py).
std::vector<std::string> registry_specs() {
  std::vector<std::string> v;
  for (const ActivationSpec& a : registry_test_specs()) {
    const std::string scale = a.scale == ScaleKind::value ? std::to_string(a.scale_value)
                                                          : std::string(kScales[static_cast<size_t>(a.scale)].name);
    v.push_back(std::string(activation_name(a.activation)) + ":" + std::to_string(a.degree) + ":" + scale);
  }
  return v;
}

}  // namespace
}  // namespace attnsweep

TORCH_LIBRARY(attnsweep, m) {
  m.def(
      "attention(Tensor q, Tensor k, Tensor v, str activation, int degree=1, str scale=\"none\", bool causal=False, "
      "Tensor? key_mask=None, float? score_scale=None) -> (Tensor out, Tensor attn_fro, Tensor jac_fro)");
  m.def(
      "attention_forward(Tensor q, Tensor k, Tensor v, str activation, int degree, str scale, bool causal, "
      "Tensor? key_mask, float? score_scale) -> (Tensor out, Tensor lse, Tensor attn_fro, Tensor jac_fro)");
  m.def(
      "attention_backward(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, str activation, "
      "int degree, str scale, bool causal, Tensor? key_mask, float? score_scale) -> (Tensor dq, Tensor dk, Tensor dv)");
  m.def("registry_specs() -> str[]", &attnsweep::registry_specs);
}

TORCH_LIBRARY_IMPL(attnsweep, CPU, m) {
  m.impl("attention_forward", &attnsweep::forward_cpu);
  m.impl("attention_backward", &attnsweep::backward_cpu);
}

TORCH_LIBRARY_IMPL(attnsweep, CompositeImplicitAutograd, m) {
  m.impl("attention", &attnsweep::attention);
}
