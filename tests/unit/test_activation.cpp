// The activation family's per-row norm sums (kernels/activation.h), the definitions the
// norm probe and every kernel share: against a direct float64 computation, and
// Theorem 4.1 on random and adversarial rows: ||softmax row||^2 <= 1 and
// ||J_row||_F^2 <= 1/4, the latter attained by two equal maxima (1/2, 1/2, 0, ...).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/param_spec.h"
#include "kernels/activation.h"

using namespace attnsweep;

namespace {

// Direct float64: materialise p and the Jacobian diag(p) - p p^T.
RowNormSq softmax_direct(const std::vector<double>& s) {
  const size_t n = s.size();
  double m = s[0];
  for (double x : s) m = std::max(m, x);
  std::vector<double> p(n);
  double z = 0;
  for (size_t j = 0; j < n; ++j) z += (p[j] = std::exp(s[j] - m));
  for (double& x : p) x /= z;
  RowNormSq r;
  for (size_t i = 0; i < n; ++i) {
    r.attn += p[i] * p[i];
    for (size_t j = 0; j < n; ++j) {
      const double jij = (i == j ? p[i] : 0.0) - p[i] * p[j];
      r.jac += jij * jij;
    }
  }
  return r;
}

PhiParams params(Activation a, int degree, ScaleKind sc, int64_t n, double value = 1.0) {
  ActivationSpec spec;
  spec.activation = a;
  spec.degree = degree;
  spec.scale = sc;
  spec.scale_value = value;
  return resolve_phi(spec, n);
}

}  // namespace

TEST(Activation, ResolveScaleAndBias) {
  EXPECT_FLOAT_EQ(params(Activation::poly, 3, ScaleKind::inv_sqrt_n, 196).c, 1.0f / 14.0f);  // paper A's 1/14
  EXPECT_FLOAT_EQ(params(Activation::relu, 1, ScaleKind::inv_n, 64).c, 1.0f / 64.0f);
  EXPECT_FLOAT_EQ(params(Activation::poly, 1, ScaleKind::value, 64, 0.25).c, 0.25f);
  EXPECT_FLOAT_EQ(params(Activation::sigmoid, 1, ScaleKind::none, 100).bias, static_cast<float>(-std::log(100.0)));
  EXPECT_FLOAT_EQ(params(Activation::softmax, 1, ScaleKind::inv_n, 100).c, 1.0f);  // scale does not apply to softmax
}

TEST(Activation, ElementwiseMatchesDirectSums) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> nd(0.0, 1.5);
  const int64_t n = 37;
  std::vector<double> s(n);
  for (double& x : s) x = nd(rng);
  // Every element-wise activation of the registry, against its plain float64 reference.
  for (const ActivationSpec& spec : registry_test_specs()) {
    const ActivationInfo& info = activation_info(spec.activation);
    if (!info.elementwise) continue;
    const PhiParams p = resolve_phi(spec, n);
    double attn = 0, jac = 0;
    for (double x : s) {
      const double f = info.ref_phi(x, p.c, p.degree, p.bias), g = info.ref_dphi(x, p.c, p.degree, p.bias);
      attn += f * f;
      jac += g * g;
    }
    const RowNormSq r = row_norms(p, s.data(), n);
    EXPECT_NEAR(r.attn, attn, 1e-12 * std::max(1.0, attn)) << spec_token(spec);
    EXPECT_NEAR(r.jac, jac, 1e-12 * std::max(1.0, jac)) << spec_token(spec);
  }
}

TEST(Activation, SoftmaxRowSumsMatchMaterialisedJacobian) {
  std::mt19937_64 rng(2);
  for (int64_t n : {1, 2, 7, 64, 129}) {
    for (double spread : {0.1, 1.0, 10.0}) {
      std::normal_distribution<double> nd(0.0, spread);
      std::vector<double> s(n);
      for (double& x : s) x = nd(rng);
      const RowNormSq want = softmax_direct(s);
      const RowNormSq got = row_norms(params(Activation::softmax, 1, ScaleKind::none, n), s.data(), n);
      EXPECT_NEAR(got.attn, want.attn, 1e-12) << "n=" << n << " spread=" << spread;
      EXPECT_NEAR(got.jac, want.jac, 1e-12) << "n=" << n << " spread=" << spread;
    }
  }
}

// Theorem 4.1 per row: sum p^2 <= 1 and ||diag(p) - pp^T||_F^2 <= 1/4, so over N rows
// ||softmax(S)||_F <= sqrt(N) and ||d softmax / dS||_F <= sqrt(N)/2.
TEST(Activation, SoftmaxBoundsOnRandomAndAdversarialRows) {
  const PhiParams p = params(Activation::softmax, 1, ScaleKind::none, 1);
  std::mt19937_64 rng(3);
  double worst_attn = 0, worst_jac = 0;
  auto check = [&](const std::vector<float>& s, const char* what) {
    const RowNormSq r = row_norms(p, s.data(), static_cast<int64_t>(s.size()));
    ASSERT_TRUE(std::isfinite(r.attn) && std::isfinite(r.jac)) << what;
    EXPECT_LE(r.attn, 1.0 + 1e-12) << what;
    EXPECT_LE(r.jac, 0.25 + 1e-12) << what;
    EXPECT_GE(r.jac, 0.0) << what;
    worst_attn = std::max(worst_attn, r.attn);
    worst_jac = std::max(worst_jac, r.jac);
  };
  for (int64_t n : {1, 2, 3, 16, 1000}) {
    for (double scale : {1.0, 30.0, 1e4}) {  // 1e4: huge logits, exp overflows without the max shift
      std::normal_distribution<float> nd(0.0f, static_cast<float>(scale));
      for (int t = 0; t < 20; ++t) {
        std::vector<float> s(n);
        for (float& x : s) x = nd(rng);
        check(s, "random");
      }
    }
    std::vector<float> one_hot(n, 0.0f);
    one_hot[0] = 1e4f;
    check(one_hot, "one-hot");
    if (n >= 2) {
      std::vector<float> two_hot(n, -1e4f);
      two_hot[0] = two_hot[n - 1] = 50.0f;
      check(two_hot, "two-hot");
      // (1/2, 1/2, 0, ...): sum p^2 = 1/2, sum p^3 = 1/4 -> 1/2 - 1/2 + 1/4 = 1/4 exactly.
      const RowNormSq r = row_norms(p, two_hot.data(), n);
      EXPECT_NEAR(r.jac, 0.25, 1e-12) << "the sqrt(N)/2 bound is attained by two-hot rows, n=" << n;
      EXPECT_NEAR(r.attn, 0.5, 1e-12);
    }
    // One-hot rows attain the sqrt(N) bound of the attention matrix and have a zero Jacobian.
    const RowNormSq oh = row_norms(p, one_hot.data(), n);
    EXPECT_NEAR(oh.attn, 1.0, 1e-12);
    EXPECT_NEAR(oh.jac, 0.0, 1e-12);
  }
  EXPECT_NEAR(worst_jac, 0.25, 1e-9);
  EXPECT_NEAR(worst_attn, 1.0, 1e-9);
}

// A cell config's activation keys go through the one parser of a spec
// (parse_activation_spec), as the attention command's and the PyTorch op's do: a numeric
// scale exactly, a refused value with the parser's message.
TEST(Activation, CellConfigIsReadByTheOneSpecParser) {
  const ActivationSpec a = activation_spec_of(json{{"activation", "relu"}, {"scale", 0.1}});
  EXPECT_EQ(a.activation, Activation::relu);
  EXPECT_EQ(a.scale, ScaleKind::value);
  EXPECT_EQ(a.scale_value, 0.1);  // the shortest decimal of a double reads back to it
  const ActivationSpec b = activation_spec_of(json{{"activation", "poly"}, {"degree", 3}, {"scale", "inv_n"}});
  EXPECT_EQ(b.activation, Activation::poly);
  EXPECT_EQ(b.degree, 3);
  EXPECT_EQ(b.scale, ScaleKind::inv_n);
  const ActivationSpec c = activation_spec_of(json{{"activation", "softmax"}});
  EXPECT_EQ(c.scale, ScaleKind::none);
  EXPECT_EQ(c.degree, 1);
  for (const auto& [config, message] :
       {std::pair{json{{"activation", "tanh"}}, std::string("activation: expected softmax, ")},
        std::pair{json{{"activation", "relu"}, {"scale", -2}}, std::string("scale: expected none, inv_sqrt_n, inv_n")},
        std::pair{json{{"activation", "poly"}, {"degree", 17}}, std::string("degree: expected an integer in 1..16")}}) {
    try {
      (void)activation_spec_of(config);
      ADD_FAILURE() << config.dump() << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(message, 0), 0u) << e.what();
    }
  }
}
