// attnsweep's attention as a PyTorch op (docs/pytorch.md):
//   torch.ops.attnsweep.attention(q, k, v, activation, degree=1, scale="none", causal=False,
//                                 key_mask=None, score_scale=None) -> (out, attn_fro, jac_fro)
// phi(score_scale Q K^T) V for every activation of the registry (kernels/activation.h) on
// the CPU kernels of kernels/attention.h, with the per-(batch item, head) norms
// ||phi(S)||_F and ||d phi/dS||_F from the same pass and no [Nq, Nk] tensor. Autograd goes
// through attnsweep's own backward; the norms are outputs without a gradient.
//
// Two ops do the work (CPU kernels, registered for the CPU key): attention_forward (out,
// lse, attn_fro, jac_fro) and attention_backward (dq, dk, dv). `attention` ties them into
// one autograd node (a torch::autograd::Function) and is registered as
// CompositeImplicitAutograd, so that it records its node whatever the inputs' key.
//
// float32 only: the kernels compute in float32 (float64 is refused, naming the dtype);
// contiguous [B,H,N,d] tensors only (a transposed view is refused rather than copied
// behind the caller's back); key_mask [B,Nk], bool or float32 0/1.
#include "kernels/activation.h"
#include "kernels/attention.h"

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

// The checked call: spec and shape from the arguments, or a c10::Error (a RuntimeError in
// Python) naming the argument and what was expected.
struct Call {
  AttentionSpec spec;
  AttentionShape shape;
  c10::optional<at::Tensor> mask;  // float32 [B,Nk], contiguous
};

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

void check_tensor(const at::Tensor& t, const char* name, const char* layout) {
  TORCH_CHECK(t.defined(), "attnsweep.attention: ", name, ": expected a tensor, got None");
  TORCH_CHECK(t.device().is_cpu(), "attnsweep.attention: ", name, " is on ", t.device(),
              "; this op runs on the CPU (attnsweep's CUDA kernels are not in this build)");
  TORCH_CHECK(t.scalar_type() == at::kFloat, "attnsweep.attention: ", name, ": expected float32, got ", t.scalar_type(),
              " (attnsweep's kernels compute in float32)");
  TORCH_CHECK(t.dim() == 4, "attnsweep.attention: ", name, ": expected 4 dimensions ", layout, ", got shape ",
              shape_of(t));
  TORCH_CHECK(
      t.is_contiguous(), "attnsweep.attention: ", name, ": expected a contiguous tensor ", layout,
      " (a view such as x.transpose(1, 2) is not copied behind your back: pass x.transpose(1, 2).contiguous())");
}

Call check_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const std::string& activation,
                int64_t degree, const std::string& scale, bool causal, const c10::optional<at::Tensor>& key_mask,
                c10::optional<double> score_scale) {
  Call c;
  const std::string problem = parse_activation_spec(activation, degree, scale, &c.spec.act);
  TORCH_CHECK(problem.empty(), "attnsweep.attention: ", problem);
  check_tensor(q, "q", "[B, H, Nq, d]");
  check_tensor(k, "k", "[B, H, Nk, d]");
  check_tensor(v, "v", "[B, H, Nk, dv]");
  const int64_t B = q.size(0), H = q.size(1), Nq = q.size(2), d = q.size(3), Nk = k.size(2), dv = v.size(3);
  TORCH_CHECK(k.size(0) == B && k.size(1) == H && k.size(3) == d, "attnsweep.attention: k: expected [B, H, Nk, d] = [",
              B, ", ", H, ", Nk, ", d, "] (q is ", shape_of(q), "), got ", shape_of(k));
  TORCH_CHECK(v.size(0) == B && v.size(1) == H && v.size(2) == Nk,
              "attnsweep.attention: v: expected [B, H, Nk, dv] = [", B, ", ", H, ", ", Nk, ", dv] (k is ", shape_of(k),
              "), got ", shape_of(v));
  TORCH_CHECK(B > 0 && H > 0 && Nq > 0 && Nk > 0 && d > 0 && dv > 0,
              "attnsweep.attention: expected every dimension >= 1, got q ", shape_of(q), ", k ", shape_of(k), ", v ",
              shape_of(v));
  if (key_mask.has_value() && key_mask->defined()) {
    const at::Tensor& m = *key_mask;
    TORCH_CHECK(m.device().is_cpu(), "attnsweep.attention: key_mask is on ", m.device(), "; expected the CPU");
    TORCH_CHECK(m.dim() == 2 && m.size(0) == B && m.size(1) == Nk,
                "attnsweep.attention: key_mask: expected [B, Nk] = [", B, ", ", Nk, "], got ", shape_of(m));
    TORCH_CHECK(m.scalar_type() == at::kBool || m.scalar_type() == at::kFloat,
                "attnsweep.attention: key_mask: expected bool or float32 (1 = attend, 0 = padding), got ",
                m.scalar_type());
    at::Tensor f = m.to(at::kFloat).contiguous();
    TORCH_CHECK(at::logical_or(f == 0, f == 1).all().item<bool>(),
                "attnsweep.attention: key_mask: expected only 0 and 1 (1 = attend, 0 = padding)");
    c.mask = f;
  }
  if (score_scale.has_value())
    TORCH_CHECK(std::isfinite(*score_scale) && *score_scale > 0,
                "attnsweep.attention: score_scale: expected a positive number (None: 1/sqrt(d)), got ", *score_scale);
  c.spec.causal = causal;
  c.spec.collect_norms = true;
  c.spec.score_scale = score_scale.has_value() ? static_cast<float>(*score_scale) : 0.0f;
  c.shape = AttentionShape{B, H, Nq, Nk, d, dv};
  return c;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> forward_cpu(const at::Tensor& q, const at::Tensor& k,
                                                                       const at::Tensor& v, std::string activation,
                                                                       int64_t degree, std::string scale, bool causal,
                                                                       const c10::optional<at::Tensor>& key_mask,
                                                                       c10::optional<double> score_scale) {
  const Call c = check_call(q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  const AttentionShape& sh = c.shape;
  at::Tensor out = at::empty({sh.B, sh.H, sh.Nq, sh.dv}, q.options());
  const bool softmax = c.spec.act.activation == Activation::softmax;
  at::Tensor lse = at::empty({softmax ? sh.B : 0, sh.H, sh.Nq}, q.options());
  at::Tensor attn = at::empty({sh.B, sh.H}, q.options().dtype(at::kDouble));
  at::Tensor jac = at::empty({sh.B, sh.H}, q.options().dtype(at::kDouble));
  attention_forward_cpu(c.spec, sh, q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                        c.mask ? c.mask->data_ptr<float>() : nullptr, out.data_ptr<float>(),
                        softmax ? lse.data_ptr<float>() : nullptr, attn.data_ptr<double>(), jac.data_ptr<double>());
  return {out, lse, attn, jac};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> backward_cpu(const at::Tensor& grad_out, const at::Tensor& q,
                                                            const at::Tensor& k, const at::Tensor& v,
                                                            const at::Tensor& out, const at::Tensor& lse,
                                                            std::string activation, int64_t degree, std::string scale,
                                                            bool causal, const c10::optional<at::Tensor>& key_mask,
                                                            c10::optional<double> score_scale) {
  const Call c = check_call(q, k, v, activation, degree, scale, causal, key_mask, score_scale);
  const AttentionShape& sh = c.shape;
  check_tensor(grad_out, "grad_out", "[B, H, Nq, dv]");
  TORCH_CHECK(grad_out.sizes() == out.sizes(), "attnsweep.attention: grad_out: expected ", shape_of(out), ", got ",
              shape_of(grad_out));
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
