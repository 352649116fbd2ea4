#include "torch_op/call.h"

#include "kernels/activation.h"

#include <cmath>

namespace attnsweep::torch_op {
namespace {

std::string shape_of(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// t on `device` (q's, once q is checked), of a type its kernels take, [4 dims], contiguous.
void check_tensor(const at::Tensor& t, const char* name, const char* layout, c10::DeviceType device,
                  const at::Tensor* like) {
  TORCH_CHECK(t.defined(), "attnsweep.attention: ", name, ": expected a tensor, got None");
  if (device == c10::DeviceType::CPU) {
    TORCH_CHECK(t.device().is_cpu(), "attnsweep.attention: ", name, " is on ", t.device(), "; expected the CPU (as q)");
    TORCH_CHECK(t.scalar_type() == at::kFloat, "attnsweep.attention: ", name, ": expected float32, got ",
                t.scalar_type(), " (attnsweep's CPU kernels compute in float32)");
  } else {
    TORCH_CHECK(t.device().is_cuda(), "attnsweep.attention: ", name, " is on ", t.device(), "; expected a GPU (as q)");
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16, "attnsweep.attention: ", name,
                ": expected float32 or bfloat16, got ", t.scalar_type(),
                " (attnsweep's CUDA kernels take these, accumulating in float32)");
  }
  if (like) {
    TORCH_CHECK(t.device() == like->device(), "attnsweep.attention: ", name, " is on ", t.device(),
                "; expected q's device, ", like->device());
    TORCH_CHECK(t.scalar_type() == like->scalar_type(), "attnsweep.attention: ", name, ": expected q's type, ",
                like->scalar_type(), ", got ", t.scalar_type());
  }
  TORCH_CHECK(t.dim() == 4, "attnsweep.attention: ", name, ": expected 4 dimensions ", layout, ", got shape ",
              shape_of(t));
  TORCH_CHECK(
      t.is_contiguous(), "attnsweep.attention: ", name, ": expected a contiguous tensor ", layout,
      " (a view such as x.transpose(1, 2) is not copied behind your back: pass x.transpose(1, 2).contiguous())");
}

}  // namespace

Call check_call(c10::DeviceType device, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const std::string& activation, int64_t degree, const std::string& scale, bool causal,
                const c10::optional<at::Tensor>& key_mask, c10::optional<double> score_scale) {
  Call c;
  const std::string problem = parse_activation_spec(activation, degree, scale, &c.spec.act);
  TORCH_CHECK(problem.empty(), "attnsweep.attention: ", problem);
  check_tensor(q, "q", "[B, H, Nq, d]", device, nullptr);
  check_tensor(k, "k", "[B, H, Nk, d]", device, &q);
  check_tensor(v, "v", "[B, H, Nk, dv]", device, &q);
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
    TORCH_CHECK(m.device() == q.device(), "attnsweep.attention: key_mask is on ", m.device(), "; expected q's device, ",
                q.device());
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

void check_grad_out(const at::Tensor& grad_out, const at::Tensor& out) {
  check_tensor(grad_out, "grad_out", "[B, H, Nq, dv]", out.device().type(), &out);
  TORCH_CHECK(grad_out.sizes() == out.sizes(), "attnsweep.attention: grad_out: expected ", shape_of(out), ", got ",
              shape_of(grad_out));
}

ForwardOutputs forward_outputs(const Call& c, const at::Tensor& q) {
  const AttentionShape& sh = c.shape;
  const bool softmax = c.spec.act.activation == Activation::softmax;
  return {at::empty({sh.B, sh.H, sh.Nq, sh.dv}, q.options()),
          at::empty({softmax ? sh.B : 0, sh.H, sh.Nq}, q.options().dtype(at::kFloat)),
          at::empty({sh.B, sh.H}, q.options().dtype(at::kDouble)),
          at::empty({sh.B, sh.H}, q.options().dtype(at::kDouble))};
}

}  // namespace attnsweep::torch_op
