// experiments/icl_regression: the prompt generator (seeded, reproducible, the right
// Gaussian law), the read-out's output T_L against the model's own forward (scores /
// sqrt(d+1)), the large-prompt limit T_inf of Lemma 2.1 in the identity case against
// Monte-Carlo, limit_sq_error's 1/L rate, and the trainer's eval hook (steps = 0,
// trajectories, checkpoint resume).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "coordinator/grid.h"
#include "experiments/icl_prompt_math.h"
#include "experiments/icl_regression.h"
#include "experiments/normals.h"
#include "tests/unit/trainer_test_util.h"
#include "worker/model/model.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {

ActivationSpec softmax_spec() {
  return ActivationSpec{};
}
ActivationSpec spec(Activation a, int degree, ScaleKind scale) {
  ActivationSpec s;
  s.activation = a;
  s.degree = degree;
  s.scale = scale;
  return s;
}

TEST(IclRegression, PromptsAreSeededAndReproducible) {
  const IclSetup s = make_icl_setup(5, 12, 0.5, 0.1, 7);
  IclPrompt a, b;
  icl_prompt(s, 0, 3, a);
  icl_prompt(s, 0, 3, b);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.target, b.target);
  ASSERT_EQ(a.tokens.size(), 13u * 6u);
  EXPECT_EQ(a.tokens[12 * 6 + 5], 0.0) << "the query's y coordinate is 0";
  icl_prompt(s, 0, 4, b);  // another index
  EXPECT_NE(a.tokens, b.tokens);
  icl_prompt(s, 1, 3, b);  // the test split
  EXPECT_NE(a.tokens, b.tokens);
  icl_prompt(make_icl_setup(5, 12, 0.5, 0.1, 8), 0, 3, b);  // another seed
  EXPECT_NE(a.tokens, b.tokens);
  EXPECT_NE(a.w, b.w);
}

// A prompt is icl_token (experiments/icl_prompt_math.h) of its normals, token by token, one
// float at a time (a CUDA thread's form): the same bits as the host's 8 tokens a vector, for
// every d up to the largest and lengths on both sides of a vector's 8.
TEST(IclRegression, PromptsAreTheirTokensOneAtATime) {
  std::vector<float> scratch;
  for (int64_t d : {1, 2, 5, 13, kIclMaxD})
    for (int64_t L : {1, 7, 8, 16, 40, 1000}) {
      const IclSetup s = make_icl_setup(d, L, 0.5, 0.1, 11 + d);
      const int64_t T = L + 1, C = d + 1;
      const IclDraws draws{d, T};
      for (int64_t index : {0, 9, 1 << 20}) {
        std::vector<float> tokens(static_cast<size_t>(T * C)), want_w(static_cast<size_t>(d));
        float target = 0;
        icl_prompt_tokens(s, 0, index, tokens.data(), &target, want_w.data(), scratch);
        std::vector<float> z(static_cast<size_t>(draws.count()));
        philox_normals(icl_prompt_key(s, 0), static_cast<uint64_t>(index), z.data(), draws.count());
        std::vector<float> w(static_cast<size_t>(d)), got(tokens.size()), x(static_cast<size_t>(d));
        for (int64_t k = 0; k < d; ++k) w[static_cast<size_t>(k)] = icl_w_sd(s) * z[static_cast<size_t>(draws.w(k))];
        float got_target = 0;
        for (int64_t t = 0; t < T; ++t) {
          const auto g = [&](int64_t i) { return z[static_cast<size_t>(draws.g(i, t))]; };
          const float y = icl_token<float>(s.chol_f.data(), w.data(), icl_noise_sd(s), d, g,
                                           z[static_cast<size_t>(draws.eps(t))], x.data());
          for (int64_t k = 0; k < d; ++k) got[static_cast<size_t>(t * C + k)] = x[static_cast<size_t>(k)];
          got[static_cast<size_t>(t * C + d)] = t < L ? y : 0.0f;
          if (t == L) got_target = y;
        }
        ASSERT_EQ(std::memcmp(got.data(), tokens.data(), tokens.size() * sizeof(float)), 0)
            << "d " << d << " L " << L << " index " << index;
        EXPECT_EQ(std::memcmp(&got_target, &target, sizeof target), 0);
        EXPECT_EQ(std::memcmp(w.data(), want_w.data(), w.size() * sizeof(float)), 0);
      }
    }
  EXPECT_THROW(make_icl_setup(kIclMaxD + 1, 4, 0.5, 0.1, 1), std::runtime_error);
}

// Monte-Carlo tolerances: 4000 prompts of 10 tokens and a query, 44 000 independent x.
// A sample covariance entry over n draws has sd sqrt((S_ii S_jj + S_ij^2) / n) <= sqrt(2/n)
// = 0.0067; we allow 5 sd. The noise y - w^T x (variance 0.1) has a sample variance with
// sd 0.1 sqrt(2/n) = 0.0007 (allowed 0.0035). w's 20 000 entries have variance 1/d = 0.2
// with sd 0.2 sqrt(2/20000) = 0.002 (allowed 0.01). E y^2 = tr(Sigma)/d + 0.1 = 1.1; its
// estimate is dominated by the spread of w^T Sigma w across prompts (variance
// 2 tr(Sigma^2)/d^2 = 0.6, so sd 0.012 over 4000 prompts; allowed 0.07).
TEST(IclRegression, TokenStatistics) {
  const int64_t d = 5, L = 10, P = 4000, C = d + 1;
  const double rho = 0.5, noise = 0.1;
  const IclSetup s = make_icl_setup(d, L, rho, noise, 1);
  std::vector<double> cov(static_cast<size_t>(d * d), 0.0), qcov(static_cast<size_t>(d * d), 0.0);
  double ww = 0, res2 = 0, qres2 = 0, y2 = 0, mean_x = 0;
  IclPrompt pr;
  for (int64_t p = 0; p < P; ++p) {
    icl_prompt(s, 0, p, pr);
    for (double w : pr.w) ww += w * w;
    for (int64_t t = 0; t <= L; ++t) {
      const double* tok = pr.tokens.data() + t * C;
      double wx = 0;
      for (int64_t i = 0; i < d; ++i) {
        wx += pr.w[static_cast<size_t>(i)] * tok[i];
        mean_x += tok[i];
        for (int64_t j = 0; j < d; ++j) (t < L ? cov : qcov)[static_cast<size_t>(i * d + j)] += tok[i] * tok[j];
      }
      if (t < L) {
        res2 += (tok[d] - wx) * (tok[d] - wx);
        y2 += tok[d] * tok[d];
      } else {
        ASSERT_EQ(tok[d], 0.0);
        qres2 += (pr.target - wx) * (pr.target - wx);
      }
    }
  }
  const double n = static_cast<double>(P * L);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) {
      const double want = std::pow(rho, std::abs(static_cast<double>(i - j)));
      EXPECT_NEAR(cov[static_cast<size_t>(i * d + j)] / n, want, 0.035) << i << "," << j;
      // The query: 4000 draws only, sd <= sqrt(2/4000) = 0.022, allowed 5 sd.
      EXPECT_NEAR(qcov[static_cast<size_t>(i * d + j)] / static_cast<double>(P), want, 0.11)
          << "query " << i << "," << j;
    }
  EXPECT_NEAR(mean_x / (static_cast<double>(P * (L + 1)) * d), 0.0, 0.01);
  EXPECT_NEAR(res2 / n, noise, 0.0035);
  EXPECT_NEAR(qres2 / static_cast<double>(P), noise, 0.012);  // sd 0.1 sqrt(2/4000) = 0.0022
  EXPECT_NEAR(ww / static_cast<double>(P * d), 1.0 / d, 0.01);
  EXPECT_NEAR(y2 / n, 1.1, 0.07);
}

TEST(IclRegression, TokenCovarianceIsGammaW) {
  const IclSetup s = make_icl_setup(3, 4, 0.5, 0.1, 0);
  const double w[3] = {1.0, -2.0, 0.5};
  const std::vector<double> g = icl_token_covariance(s, w);
  // Sigma = [[1, .5, .25], [.5, 1, .5], [.25, .5, 1]]; Sigma w = (0.125, -1.25, -0.25).
  const double sw[3] = {0.125, -1.25, -0.25};
  for (int i = 0; i < 3; ++i) {
    EXPECT_DOUBLE_EQ(g[static_cast<size_t>(i * 4 + 3)], sw[i]);
    EXPECT_DOUBLE_EQ(g[static_cast<size_t>(3 * 4 + i)], sw[i]);
  }
  EXPECT_DOUBLE_EQ(g[15], 0.125 * 1 + 1.25 * 2 - 0.25 * 0.5 + 0.1);
  EXPECT_DOUBLE_EQ(g[1], 0.5);
  EXPECT_DOUBLE_EQ(g[2], 0.25);
}

// Read-out weights stored like the model's qkv_w (1, 3C, C).
struct HandWeights {
  int64_t C;
  std::vector<float> qkv;
  ModelWeights view() const { return ModelWeights{{{"qkv_w", {qkv.data(), {1, 3 * C, C}}}}}; }
};
// Q = K = qk I, V = I.
HandWeights identity_weights(int64_t C, float qk = 1.0f) {
  HandWeights h{C, std::vector<float>(static_cast<size_t>(3 * C * C), 0.0f)};
  for (int m = 0; m < 3; ++m)
    for (int64_t i = 0; i < C; ++i) h.qkv[static_cast<size_t>(m * C * C + i * C + i)] = m < 2 ? qk : 1.0f;
  return h;
}

// The model's read-out (worker/model/model.cpp) predicts the last coordinate of T_L(z), with
// scores <K x_i, Q z> / sqrt(d + 1): checked against a direct float64 sum written here
// for softmax and against readout_attention_output for every activation.
TEST(IclRegression, ReadoutMatchesModelForwardWithScoreScaleOneOverSqrtC) {
  const int64_t d = 5, C = d + 1, L = 40;
  const IclSetup s = make_icl_setup(d, L, 0.5, 0.1, 3);
  for (const ActivationSpec& act :
       {softmax_spec(), spec(Activation::poly, 1, ScaleKind::inv_n), spec(Activation::poly, 3, ScaleKind::inv_sqrt_n),
        spec(Activation::relu, 1, ScaleKind::inv_n), spec(Activation::sigmoid, 1, ScaleKind::none)}) {
    ModelConfig mc;
    mc.head = Head::readout;
    mc.tokens = L + 1;
    mc.in_dim = mc.dim = C;
    mc.layers = mc.heads = 1;
    mc.classes = 0;
    mc.act = act;
    Model m(mc);
    m.init(11, 0.4);
    const ReadoutWeights W = readout_weights(weights_of(m));
    ASSERT_EQ(W.C, C);
    for (int64_t p = 0; p < 4; ++p) {
      IclPrompt pr;
      icl_prompt(s, 1, p, pr);
      std::vector<float> x(pr.tokens.begin(), pr.tokens.end());
      std::vector<double> tokens(x.begin(), x.end());  // exactly what the model sees
      const float y0 = 0.0f, y1 = 1.0f;
      const double l0 = m.forward(x.data(), nullptr, &y0, 1, false).loss;  // p^2
      const double l1 = m.forward(x.data(), nullptr, &y1, 1, false).loss;  // (p - 1)^2
      const double pred = (l0 - l1 + 1.0) / 2.0;
      std::vector<double> out(static_cast<size_t>(C));
      readout_attention_output(act, W, tokens.data(), L, out.data());
      EXPECT_NEAR(pred, out[static_cast<size_t>(C - 1)], 2e-4 * (1 + std::fabs(pred)))
          << "activation " << static_cast<int>(act.activation);
      if (act.activation == Activation::softmax) {
        // Independently: s_i = (K x_i) . (Q z) / sqrt(6), softmax, prediction = (V sum p_i x_i)_last.
        const double* z = tokens.data() + L * C;
        std::vector<double> q(static_cast<size_t>(C), 0.0), sc(static_cast<size_t>(L), 0.0);
        for (int64_t i = 0; i < C; ++i)
          for (int64_t j = 0; j < C; ++j) q[static_cast<size_t>(i)] += W.Q[static_cast<size_t>(i * C + j)] * z[j];
        double mx = -1e300, zsum = 0, want = 0;
        for (int64_t t = 0; t < L; ++t) {
          for (int64_t i = 0; i < C; ++i) {
            double k = 0;
            for (int64_t j = 0; j < C; ++j)
              k += W.K[static_cast<size_t>(i * C + j)] * tokens[static_cast<size_t>(t * C + j)];
            sc[static_cast<size_t>(t)] += k * q[static_cast<size_t>(i)] / std::sqrt(6.0);
          }
          mx = std::max(mx, sc[static_cast<size_t>(t)]);
        }
        for (int64_t t = 0; t < L; ++t) {
          const double e = std::exp(sc[static_cast<size_t>(t)] - mx);
          zsum += e;
          double v = 0;
          for (int64_t j = 0; j < C; ++j)
            v += W.V[static_cast<size_t>((C - 1) * C + j)] * tokens[static_cast<size_t>(t * C + j)];
          want += e * v;
        }
        want /= zsum;
        EXPECT_NEAR(pred, want, 2e-4 * (1 + std::fabs(want)));
      }
    }
  }
}

// Identity case: Sigma = I (rho = 0), Q = K = V = I. Then a = z / sqrt(6), Gamma_w z =
// (x, w^T x) for the query z = (x, 0), so T_inf(z) = (x, w^T x) / sqrt(6) for softmax and
// linear attention, half that for relu / N, and 3 (a^T Gamma a) times it for s^3 / N.
TEST(IclRegression, LimitInIdentityCaseIsClosedForm) {
  const int64_t d = 5, C = 6;
  const IclSetup s = make_icl_setup(d, 8, 0.0, 0.1, 2);
  const HandWeights h = identity_weights(C);
  const ReadoutWeights W = readout_weights(h.view());
  IclPrompt pr;
  for (int64_t p = 0; p < 5; ++p) {
    icl_prompt(s, 1, p, pr);
    const double* z = pr.tokens.data() + 8 * C;
    double wx = 0, xx = 0;
    for (int64_t i = 0; i < d; ++i) wx += pr.w[static_cast<size_t>(i)] * z[i], xx += z[i] * z[i];
    const std::vector<double> g = icl_token_covariance(s, pr.w.data());
    std::vector<double> out(C);
    for (auto [act, factor] :
         {std::pair{softmax_spec(), 1.0}, std::pair{spec(Activation::poly, 1, ScaleKind::inv_n), 1.0},
          std::pair{spec(Activation::relu, 1, ScaleKind::inv_n), 0.5},
          std::pair{spec(Activation::poly, 3, ScaleKind::inv_n), 3.0 * xx / 6.0},
          std::pair{spec(Activation::poly, 2, ScaleKind::inv_n), 0.0}}) {
      readout_limit_output(act, W, g.data(), z, out.data());
      for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(out[static_cast<size_t>(i)], factor * z[i] / std::sqrt(6.0), 1e-12);
      EXPECT_NEAR(out[static_cast<size_t>(d)], factor * wx / std::sqrt(6.0), 1e-12);
    }
  }
  EXPECT_FALSE(icl_limit_defined(spec(Activation::sigmoid, 1, ScaleKind::none)));
  EXPECT_FALSE(icl_limit_defined(spec(Activation::poly, 3, ScaleKind::inv_sqrt_n)));
  EXPECT_FALSE(icl_limit_defined(spec(Activation::relu, 1, ScaleKind::none)));
  EXPECT_TRUE(icl_limit_defined(spec(Activation::poly, 3, ScaleKind::inv_n)));
}

// The limit against Monte-Carlo: T_L of one prompt of L = 300 000 tokens, computed
// directly, sits within the delta method's sd of T_inf. For softmax with V = I,
// L E||T_L - T_inf||^2 -> e^{a^T G a} (tr G + |G a|^2) (tokens tilted by e^{x^T a});
// for linear attention it is exactly (tr G) (a^T G a) + |G a|^2 at every L.
// (With Q = K = qk I: a = qk^2 z / sqrt(C).)
double delta_constant(const ActivationSpec& act, const std::vector<double>& g, const double* z, int64_t C,
                      double qk = 1.0) {
  std::vector<double> a(z, z + C), ga(C, 0.0);
  for (double& v : a) v *= qk * qk / std::sqrt(static_cast<double>(C));
  double aga = 0, tr = 0, ga2 = 0;
  for (int64_t i = 0; i < C; ++i) {
    for (int64_t j = 0; j < C; ++j)
      ga[static_cast<size_t>(i)] += g[static_cast<size_t>(i * C + j)] * a[static_cast<size_t>(j)];
    aga += a[static_cast<size_t>(i)] * ga[static_cast<size_t>(i)];
    tr += g[static_cast<size_t>(i * C + i)];
    ga2 += ga[static_cast<size_t>(i)] * ga[static_cast<size_t>(i)];
  }
  return act.activation == Activation::softmax ? std::exp(aga) * (tr + ga2) : tr * aga + ga2;
}

TEST(IclRegression, LargePromptMatchesLimitInIdentityCase) {
  const int64_t d = 5, C = 6, L = 300000;
  const IclSetup s = make_icl_setup(d, L, 0.0, 0.1, 4);
  const ReadoutWeights W = readout_weights(identity_weights(C).view());
  IclPrompt pr;
  std::vector<double> tl(C), tinf(C);
  for (int64_t p = 0; p < 3; ++p) {
    icl_prompt(s, 1, p, pr);
    const double* z = pr.tokens.data() + L * C;
    const std::vector<double> g = icl_token_covariance(s, pr.w.data());
    for (const ActivationSpec& act : {softmax_spec(), spec(Activation::poly, 1, ScaleKind::inv_n)}) {
      readout_attention_output(act, W, pr.tokens.data(), L, tl.data());
      readout_limit_output(act, W, g.data(), z, tinf.data());
      double e2 = 0, n2 = 0;
      for (int64_t i = 0; i < C; ++i) {
        e2 += (tl[static_cast<size_t>(i)] - tinf[static_cast<size_t>(i)]) *
              (tl[static_cast<size_t>(i)] - tinf[static_cast<size_t>(i)]);
        n2 += tinf[static_cast<size_t>(i)] * tinf[static_cast<size_t>(i)];
      }
      const double expected = delta_constant(act, g, z, C) / static_cast<double>(L);
      // ||T_L - T_inf||^2 is about expected * chi^2_C / C: below 5 expected fails with
      // probability < 1e-4 per check.
      EXPECT_LT(e2, 5 * expected) << "prompt " << p << ": |T_L - T_inf| = " << std::sqrt(e2)
                                  << ", |T_inf| = " << std::sqrt(n2);
      EXPECT_GT(n2, 100 * e2);  // and the limit is far from 0 compared with the error
    }
  }
}

// limit_sq_error (the mean over test prompts) against the delta method's prediction
// (delta_constant / L, averaged over the same prompts), and its log-log slope against L.
// 1500 prompts: the per-prompt error is a weighted chi^2 with relative sd about 0.8, and
// the prediction's spread across prompts adds a little: the ratio is within about 3 %
// (1 sd) once the delta method holds; we allow 12 %, and the slope -1 +- 0.12.
// Linear attention: the prediction is exact at every L. Softmax: it is asymptotic, and
// with Q = K = I the tilt e^{a^T G a} = e^{|x|^2/6} is heavy across queries, so L = 2048 is
// still 10 % short of it (measured ratios 0.68, 0.78, 0.88, 0.90 at L = 32, 128, 512,
// 2048; only the slope is checked there); with Q = K = I/sqrt(2) (tilt e^{|x|^2/24}) it
// holds from L = 128 on (0.97, 0.97, 1.00, 0.98).
TEST(IclRegression, LimitSqErrorDecaysLikeOneOverL) {
  const int64_t d = 5, C = 6, P = 1500;
  struct Case {
    ActivationSpec act;
    float qk;
    int64_t delta_from_l;  // the delta method is checked from this L on
  };
  for (const Case& c : {Case{spec(Activation::poly, 1, ScaleKind::inv_n), 1.0f, 0}, Case{softmax_spec(), 1.0f, 1 << 30},
                        Case{softmax_spec(), static_cast<float>(M_SQRT1_2), 128}}) {
    const ReadoutWeights W = readout_weights(identity_weights(C, c.qk).view());
    std::vector<double> logl, loge;
    for (int64_t L : {32, 128, 512, 1024}) {
      const IclSetup s = make_icl_setup(d, L, 0.0, 0.1, 9);
      const double err = icl_limit_sq_error(s, c.act, W, P);
      double pred = 0;
      IclPrompt pr;
      for (int64_t p = 0; p < P; ++p) {
        icl_prompt(s, 1, p, pr);
        pred += delta_constant(c.act, icl_token_covariance(s, pr.w.data()), pr.tokens.data() + L * C, C, c.qk);
      }
      pred /= static_cast<double>(P * L);
      std::printf("activation %d, Q = K = %.3f I, L %lld: limit_sq_error %.4g, delta method %.4g, ratio %.3f\n",
                  static_cast<int>(c.act.activation), c.qk, static_cast<long long>(L), err, pred, err / pred);
      if (L >= c.delta_from_l) {
        EXPECT_NEAR(err / pred, 1.0, 0.12) << "L = " << L << " activation " << static_cast<int>(c.act.activation);
      }
      logl.push_back(std::log(static_cast<double>(L)));
      loge.push_back(std::log(err));
    }
    double ml = 0, me = 0, sxy = 0, sxx = 0;
    for (size_t i = 0; i < logl.size(); ++i) ml += logl[i] / 4, me += loge[i] / 4;
    for (size_t i = 0; i < logl.size(); ++i)
      sxy += (logl[i] - ml) * (loge[i] - me), sxx += (logl[i] - ml) * (logl[i] - ml);
    EXPECT_NEAR(sxy / sxx, -1.0, 0.12) << "activation " << static_cast<int>(c.act.activation) << ", qk " << c.qk;
  }
}

// The task through the trainer: steps = 0 measures limit_sq_error at initialisation (the
// same number as computing it from a model initialised alike), training records it at
// every evaluation, sigmoid has no limit (no metric), and a resumed run is identical.

TEST(IclRegression, StepsZeroMeasuresAtInit) {
  TaskContext ctx;
  ctx.train = train_cell;
  const json cell = icl_cell("softmax");
  const TaskOutput out = run_icl_regression(cell, ctx);
  ASSERT_EQ(out.status, CellStatus::complete);
  ASSERT_TRUE(out.final_metrics.count("limit_sq_error"));
  ASSERT_TRUE(out.final_metrics.count("test_mse"));
  // The same weights by hand: the read-out of width 6 initialised with init_seed 4, sd 0.3.
  ModelConfig mc;
  mc.head = Head::readout;
  mc.tokens = 25;
  mc.in_dim = mc.dim = 6;
  mc.layers = mc.heads = 1;
  mc.classes = 0;
  Model m(mc);
  m.init(4, 0.3);
  const double want = icl_limit_sq_error(icl_setup_of(cell), softmax_spec(), readout_weights(weights_of(m)), 64);
  EXPECT_DOUBLE_EQ(out.final_metrics.at("limit_sq_error"), want);
  EXPECT_GT(want, 0.0);
  bool found = false;
  for (const auto& s : out.series)
    if (s.path == "/icl/limit_sq_error") {  // braces: EXPECT_* is an if/else
      found = true;
      ASSERT_EQ(s.shape, std::vector<uint64_t>{1});
      EXPECT_DOUBLE_EQ(std::get<std::vector<double>>(s.data)[0], want);
    }
  EXPECT_TRUE(found);

  const TaskOutput sig = run_icl_regression(icl_cell("sigmoid"), ctx);
  EXPECT_FALSE(sig.final_metrics.count("limit_sq_error"));
  for (const auto& s : sig.series) EXPECT_NE(s.path, "/icl/limit_sq_error");
}

TEST(IclRegression, TrainingRecordsTheLimitAtEveryEvalAndResumes) {
  TaskContext ctx;
  ctx.train = train_cell;
  json cell = icl_cell("softmax");
  cell["steps"] = 30;
  const TaskOutput a = run_icl_regression(cell, ctx);
  ASSERT_EQ(a.status, CellStatus::complete);
  std::vector<double> traj;
  for (const auto& s : a.series)
    if (s.path == "/icl/limit_sq_error") traj = std::get<std::vector<double>>(s.data);
  ASSERT_EQ(traj.size(), 3u);  // steps 10, 20, 30
  EXPECT_DOUBLE_EQ(a.final_metrics.at("limit_sq_error"), traj.back());
  EXPECT_NE(traj[0], traj[2]) << "the weights moved";
  EXPECT_TRUE(std::isfinite(a.final_metrics.at("test_mse")));

  // A checkpoint at step 20 (with two rows of the trajectory in it), then a resumed run.
  const std::filesystem::path ck =
      std::filesystem::temp_directory_path() / ("attnsweep_icl_" + std::to_string(::getpid()) + ".ckpt");
  cell["checkpoint_every"] = 20;
  TaskContext c2 = ctx;
  c2.checkpoint_path = ck.string();
  const TaskOutput first = run_icl_regression(cell, c2);  // leaves its step-20 checkpoint behind
  ASSERT_TRUE(std::filesystem::exists(ck));
  const TaskOutput resumed = run_icl_regression(cell, c2);  // resumes at step 20
  std::filesystem::remove(ck);
  for (const TaskOutput* o : {&first, &resumed}) {
    EXPECT_EQ(
        std::memcmp(&o->final_metrics.at("limit_sq_error"), &a.final_metrics.at("limit_sq_error"), sizeof(double)), 0);
    for (const auto& s : o->series)
      if (s.path == "/icl/limit_sq_error") {
        EXPECT_EQ(std::get<std::vector<double>>(s.data), traj);
      }
  }
}

TEST(IclRegression, TaskWiring) {
  // The task hands the trainer a read-out of width d + 1 on L + 1 tokens and the
  // generator's prompts as floats.
  TaskContext ctx;
  json seen;
  TrainingData data;
  ctx.train = [&](const json& c, const TaskContext&, const TrainingData& d) {
    seen = c;
    data = d;
    return TaskOutput{};
  };
  json cell = icl_cell("poly");
  cell["degree"] = 1;
  cell["scale"] = "inv_n";
  cell["d"] = 3;
  run_icl_regression(cell, ctx);
  EXPECT_EQ(seen.at("dim"), 4);
  EXPECT_EQ(seen.at("heads"), 1);
  EXPECT_EQ(seen.at("layers"), 1);
  EXPECT_EQ(data.tokens, 25);
  EXPECT_EQ(data.in_dim, 4);
  EXPECT_EQ(data.classes, 0);
  EXPECT_EQ(data.n_test, 64);
  EXPECT_EQ(data.n_train, 4096);
  ASSERT_EQ(data.eval_metrics.size(), 1u);
  EXPECT_EQ(data.eval_metrics[0].path, "/icl/limit_sq_error");
  const int64_t idx[2] = {5, 9};
  std::vector<float> x(2 * 25 * 4), x2(x.size());
  float y[2], y2[2];
  data.fill(1, idx, 2, x.data(), nullptr, y);
  data.fill(1, idx, 2, x2.data(), nullptr, y2);
  EXPECT_EQ(x, x2);
  IclPrompt pr;
  icl_prompt(icl_setup_of(cell), 1, 9, pr);
  for (size_t j = 0; j < 100; ++j) EXPECT_EQ(x[100 + j], static_cast<float>(pr.tokens[j]));
  EXPECT_EQ(y[1], static_cast<float>(pr.target));
}

// The task's defaults: paper B's distribution and plain SGD at a constant lr 1e-3, batch
// 128; the transformer's keys do not apply; a bad rho is an input error naming the key.
TEST(IclRegression, CellDefaults) {
  const json c = effective_config(json{{"task", "icl_regression"}, {"prompt_length", 100}}, "c");
  EXPECT_EQ(c.at("d"), 5);
  EXPECT_EQ(c.at("rho"), 0.5);
  EXPECT_EQ(c.at("noise_var"), 0.1);
  EXPECT_EQ(c.at("optimizer"), "sgd");
  EXPECT_EQ(c.at("lr"), 1e-3);
  EXPECT_EQ(c.at("batch"), 128);
  EXPECT_EQ(c.at("lr_schedule"), "constant");
  EXPECT_EQ(c.at("weight_decay"), 0.0);
  EXPECT_EQ(c.at("clip"), 0.0);
  EXPECT_EQ(c.at("warmup_steps"), 0);
  EXPECT_EQ(c.at("activation"), "softmax");
  for (const char* k : {"dim", "layers", "heads", "mlp_ratio", "cls"}) EXPECT_FALSE(c.contains(k)) << k;
  // The image task keeps its own defaults.
  const json img = effective_config(json{{"task", "image"}, {"prompt_length", 16}}, "c");
  EXPECT_EQ(img.at("optimizer"), "adamw");
  EXPECT_EQ(img.at("lr_schedule"), "cosine");
  EXPECT_EQ(img.at("layers"), 4);
  try {
    effective_config(json{{"task", "icl_regression"}, {"prompt_length", 100}, {"rho", 1.0}}, "cell.json");
    ADD_FAILURE() << "rho 1 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rho"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnsweep
