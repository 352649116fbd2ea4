// kernels/ops.h against float64 references written plainly here; every backward against
// central finite differences of the float64 reference (L = sum(out * dout)).
#include "kernels/ops.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace attnsweep {
namespace {

using Vec = std::vector<double>;
using FVec = std::vector<float>;

FVec randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  FVec x(n);
  for (auto& e : x) e = nd(rng);
  return x;
}
Vec dbl(const FVec& x) {
  return {x.begin(), x.end()};
}

// max(||got-ref|| / ||ref||, max|got-ref| / max|ref|) <= tol, non-finite values first.
template <class T>
::testing::AssertionResult close(const std::string& what, const std::vector<T>& got, const Vec& ref, double tol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": size mismatch";
  double num = 0, den = 0, maxerr = 0, maxref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g)) return ::testing::AssertionFailure() << what << ": non-finite " << g << " at " << i;
    num += (g - ref[i]) * (g - ref[i]);
    den += ref[i] * ref[i];
    maxerr = std::max(maxerr, std::abs(g - ref[i]));
    maxref = std::max(maxref, std::abs(ref[i]));
  }
  if (den == 0) return num == 0 ? ::testing::AssertionSuccess() : ::testing::AssertionFailure() << what << ": ref is 0";
  const double rel = std::max(std::sqrt(num / den), maxerr / maxref);
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << rel << " > " << tol;
}

// Float32 op vs float64 reference: a few roundings per output, sums over <= 100 terms.
constexpr double kTolF32 = 1e-5;
// Float32 backward vs central differences of the float64 reference (h = 1e-5:
// truncation ~1e-10, rounding ~1e-11): the error is the float32 backward's own.
constexpr double kTolGrad = 2e-5;

// Central-difference gradient of L(x) = sum(f(inputs) * dout) with respect to inputs[k].
Vec fd_grad(const std::function<Vec(const std::vector<Vec>&)>& f, std::vector<Vec> inputs, size_t k, const Vec& dout) {
  const double h = 1e-5;
  Vec g(inputs[k].size());
  auto L = [&]() {
    const Vec o = f(inputs);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i) s += o[i] * dout[i];
    return s;
  };
  for (size_t i = 0; i < g.size(); ++i) {
    const double x0 = inputs[k][i];
    inputs[k][i] = x0 + h;
    const double lp = L();
    inputs[k][i] = x0 - h;
    const double lm = L();
    inputs[k][i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

// Backward outputs accumulate: start from this and subtract it before comparing.
constexpr float kPre = 0.5f;
FVec pre(size_t n) {
  return FVec(n, kPre);
}
FVec minus_pre(FVec g) {
  for (auto& e : g) e -= kPre;
  return g;
}

// ---- matmul ---------------------------------------------------------------------------

Vec ref_matmul(const Vec& x, const Vec& w, const Vec& b, int64_t N, int64_t C, int64_t OC) {
  Vec o(N * OC);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < OC; ++j) {
      double s = b.empty() ? 0.0 : b[j];
      for (int64_t c = 0; c < C; ++c) s += x[i * C + c] * w[j * C + c];
      o[i * OC + j] = s;
    }
  return o;
}

TEST(Ops, Matmul) {
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const int64_t N = 5, C = 7, OC = 3;
    const FVec x = randn(N * C, 1), w = randn(OC * C, 2), b = randn(OC, 3), dout = randn(N * OC, 4);
    FVec out(N * OC);
    matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, N, C, OC);
    auto f = [&](const std::vector<Vec>& in) { return ref_matmul(in[0], in[1], with_bias ? in[2] : Vec{}, N, C, OC); };
    const std::vector<Vec> in = {dbl(x), dbl(w), dbl(b)};
    EXPECT_TRUE(close("out", out, f(in), kTolF32));
    FVec dx = pre(N * C), dw = pre(OC * C), db = pre(OC);
    matmul_backward(dx.data(), dw.data(), with_bias ? db.data() : nullptr, dout.data(), x.data(), w.data(), N, C, OC);
    EXPECT_TRUE(close("dinp", minus_pre(dx), fd_grad(f, in, 0, dbl(dout)), kTolGrad));
    EXPECT_TRUE(close("dweight", minus_pre(dw), fd_grad(f, in, 1, dbl(dout)), kTolGrad));
    if (with_bias) {
      EXPECT_TRUE(close("dbias", minus_pre(db), fd_grad(f, in, 2, dbl(dout)), kTolGrad));
    }
  }
}

// ---- layernorm ------------------------------------------------------------------------

// C = 9: the generic loops; 16, 64, 128: the AVX-512 row kernels (C a multiple of 16 up
// to 128) where the CPU has them.
TEST(Ops, Layernorm) {
  for (const int64_t C : {9, 16, 64, 128}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const int64_t N = 4;
    const FVec x = randn(N * C, 5, 2.0f), w = randn(C, 6), b = randn(C, 7), dout = randn(N * C, 8);
    auto f = [&](const std::vector<Vec>& in) {
      Vec o(N * C);
      for (int64_t i = 0; i < N; ++i) {
        double m = 0, v = 0;
        for (int64_t c = 0; c < C; ++c) m += in[0][i * C + c] / C;
        for (int64_t c = 0; c < C; ++c) v += (in[0][i * C + c] - m) * (in[0][i * C + c] - m) / C;
        for (int64_t c = 0; c < C; ++c)
          o[i * C + c] = (in[0][i * C + c] - m) / std::sqrt(v + 1e-5) * in[1][c] + in[2][c];
      }
      return o;
    };
    const std::vector<Vec> in = {dbl(x), dbl(w), dbl(b)};
    FVec out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    EXPECT_TRUE(close("out", out, f(in), kTolF32));
    FVec dx = pre(N * C), dw = pre(C), db = pre(C);
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C);
    EXPECT_TRUE(close("dinp", minus_pre(dx), fd_grad(f, in, 0, dbl(dout)), kTolGrad));
    EXPECT_TRUE(close("dweight", minus_pre(dw), fd_grad(f, in, 1, dbl(dout)), kTolGrad));
    EXPECT_TRUE(close("dbias", minus_pre(db), fd_grad(f, in, 2, dbl(dout)), kTolGrad));
  }
}

// Many rows: the parameter gradients are float32 sums over row blocks (64 rows, the last
// one partial) added in block order in float64; against a float64 sum of float64 terms,
// and bitwise the same at 1, 2 and 3 threads.
TEST(Ops, LayernormParamGradsOverManyRows) {
  const int64_t N = 300, C = 64;
  const FVec x = randn(N * C, 15, 2.0f), w = randn(C, 16), b = randn(C, 17), dout = randn(N * C, 18);
  FVec out(N * C), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  Vec rw(C, 0.0), rb(C, 0.0);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      rw[c] += static_cast<double>(dout[i * C + c]) * ((x[i * C + c] - mean[i]) * static_cast<double>(rstd[i]));
      rb[c] += dout[i * C + c];
    }
  std::vector<FVec> dws, dbs;
  const int saved = omp_get_max_threads();
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    FVec dx(N * C, 0.0f), dw(C, 0.0f), db(C, 0.0f);
    layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N,
                       C);
    dws.push_back(dw);
    dbs.push_back(db);
  }
  omp_set_num_threads(saved);
  // Each term (xhat in float32) is within a few ulp; a float32 sum of 64 of them is within
  // 63 u sum|t| in the worst case and ~8 u (sqrt 64) typically, u = 6e-8; the float64 sum
  // of the 5 blocks and the final rounding add 1 ulp. 2e-6 = 32 u (measured: 2.7e-7).
  EXPECT_TRUE(close("dweight", dws[0], rw, 2e-6));
  EXPECT_TRUE(close("dbias", dbs[0], rb, 2e-6));
  for (size_t t = 1; t < dws.size(); ++t) {
    EXPECT_TRUE(dws[t] == dws[0] && dbs[t] == dbs[0]) << "thread count changed the sums (" << t + 1 << " threads)";
  }
}

// ---- element-wise ------------------------------------------------------------------------

TEST(Ops, Gelu) {
  const int64_t n = 64;
  const FVec x = randn(n, 9, 2.0f), dout = randn(n, 10);
  auto f = [&](const std::vector<Vec>& in) {
    Vec o(n);
    for (int64_t i = 0; i < n; ++i) {
      const double v = in[0][i];
      o[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    return o;
  };
  FVec out(n), dx = pre(n);
  gelu_forward(out.data(), x.data(), n);
  EXPECT_TRUE(close("out", out, f({dbl(x)}), kTolF32));
  gelu_backward(dx.data(), x.data(), dout.data(), n);
  EXPECT_TRUE(close("dinp", minus_pre(dx), fd_grad(f, {dbl(x)}, 0, dbl(dout)), kTolGrad));
}

// The vectorised GELU (AVX-512 spans where the CPU has them) at a length that leaves a
// partial vector, over its whole range: element by element against float64, the four
// entry points consistent with one another. Tolerance: exp(-2u) carries the rounding of
// its argument, |2u| * 6e-8 relative (<= 3e-6 for |x| <= 12), plus a few ulp.
TEST(Ops, GeluTailAndRange) {
  std::vector<float> x;
  for (int i = 0; i < 64; ++i) x.push_back(-12.0f + 24.0f * static_cast<float>(i) / 63.0f);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 30.0f, -30.0f, 100.0f, -100.0f, 1e4f, -1e4f, 0.5f}) x.push_back(v);
  const int64_t n = static_cast<int64_t>(x.size());  // 75: four vectors and a partial one
  ASSERT_NE(n % 16, 0);
  const FVec dout = randn(static_cast<size_t>(n), 21);
  // 0.5 v (1 + tanh u) = v sigma(2u), written without the cancellation of 1 + tanh u
  // (which in float64 leaves nothing of gelu(-9) ~ -1e-35).
  const double k = std::sqrt(2 / M_PI);
  auto gelu64 = [k](double v) { return v / (1 + std::exp(-2 * k * (v + 0.044715 * v * v * v))); };
  auto grad64 = [k](double v) {
    const double e = std::exp(-2 * k * (v + 0.044715 * v * v * v)), sg = 1 / (1 + e), one_minus_sg = 1 / (1 + 1 / e);
    return sg + 2 * v * sg * one_minus_sg * k * (1 + 3 * 0.044715 * v * v);
  };
  FVec out(static_cast<size_t>(n), -7.0f), dx(static_cast<size_t>(n), 0.0f);
  gelu_forward(out.data(), x.data(), n);
  gelu_backward(dx.data(), x.data(), dout.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[static_cast<size_t>(i)];
    const double ref = gelu64(v), gref = grad64(v) * dout[static_cast<size_t>(i)];
    // Absolute floors: e^{-2u} is clamped at e^{88.37}, so for x < ~-10 sigma(2u) is
    // e^{-88.37} = 4.2e-39 instead of a smaller number, gelu(x) = x sigma(2u) and gelu'(x)
    // = sigma(2u) (1 + 2 x du/dx) with 2 du/dx = 1.6 + 0.21 x^2.
    const double tol = 1e-5, a = std::abs(v), sg_floor = 1e-38;
    const double floor = sg_floor * std::max(1.0, a),
                 gfloor = sg_floor * (1 + a * (2 + 0.25 * a * a)) * std::abs(dout[static_cast<size_t>(i)]);
    EXPECT_LE(std::abs(out[static_cast<size_t>(i)] - ref), tol * std::abs(ref) + floor) << "gelu(" << v << ")";
    EXPECT_LE(std::abs(dx[static_cast<size_t>(i)] - gref), tol * std::abs(gref) + gfloor) << "gelu'(" << v << ")";
  }
  // gelu_matmul_backward's fused path (recomputed output, in-place gradient) against the
  // separate ops: the same values bit for bit (one formula behind all of them).
  const int64_t N = 1, C = n, OC = 3;
  const FVec w = randn(static_cast<size_t>(OC * C), 22), dy = randn(static_cast<size_t>(N * OC), 23);
  FVec dpre_f(static_cast<size_t>(N * C)), dw_f(static_cast<size_t>(OC * C), 0.0f), db_f(static_cast<size_t>(OC), 0.0f);
  gelu_matmul_backward(dpre_f.data(), dw_f.data(), db_f.data(), dy.data(), out.data(), x.data(), w.data(), N, C, OC);
  FVec dact(static_cast<size_t>(N * C), 0.0f), dpre_u(static_cast<size_t>(N * C), 0.0f);
  FVec dw_u(static_cast<size_t>(OC * C), 0.0f), db_u(static_cast<size_t>(OC), 0.0f);
  matmul_backward(dact.data(), dw_u.data(), db_u.data(), dy.data(), out.data(), w.data(), N, C, OC);
  gelu_backward(dpre_u.data(), x.data(), dact.data(), n);
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(dpre_f[static_cast<size_t>(i)], dpre_u[static_cast<size_t>(i)]) << "at " << i;
}

TEST(Ops, Residual) {
  const int64_t n = 17;
  const FVec a = randn(n, 11), b = randn(n, 12), dout = randn(n, 13);
  auto f = [&](const std::vector<Vec>& in) {
    Vec o(n);
    for (int64_t i = 0; i < n; ++i) o[i] = in[0][i] + in[1][i];
    return o;
  };
  FVec out(n), da = pre(n), db = pre(n);
  residual_forward(out.data(), a.data(), b.data(), n);
  EXPECT_TRUE(close("out", out, f({dbl(a), dbl(b)}), kTolF32));
  residual_backward(da.data(), db.data(), dout.data(), n);
  EXPECT_TRUE(close("dinp1", minus_pre(da), fd_grad(f, {dbl(a), dbl(b)}, 0, dbl(dout)), kTolGrad));
  EXPECT_TRUE(close("dinp2", minus_pre(db), fd_grad(f, {dbl(a), dbl(b)}, 1, dbl(dout)), kTolGrad));
}

TEST(Ops, Meanpool) {
  const int64_t B = 2, T = 5, C = 3;
  const FVec x = randn(B * T * C, 14), dout = randn(B * C, 15);
  auto f = [&](const std::vector<Vec>& in) {
    Vec o(B * C, 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) o[b * C + c] += in[0][(b * T + t) * C + c] / T;
    return o;
  };
  FVec out(B * C), dx = pre(B * T * C);
  meanpool_forward(out.data(), x.data(), B, T, C);
  EXPECT_TRUE(close("out", out, f({dbl(x)}), kTolF32));
  meanpool_backward(dx.data(), dout.data(), B, T, C);
  EXPECT_TRUE(close("dinp", minus_pre(dx), fd_grad(f, {dbl(x)}, 0, dbl(dout)), kTolGrad));
}

// ---- losses ---------------------------------------------------------------------------

TEST(Ops, SoftmaxCrossEntropy) {
  const int64_t N = 6, V = 5;
  const FVec logits = randn(N * V, 16, 3.0f);
  const std::vector<int32_t> targets = {0, 4, 2, 2, 1, 3};
  auto f = [&](const std::vector<Vec>& in) {  // the mean loss, as a 1-vector
    double l = 0;
    for (int64_t i = 0; i < N; ++i) {
      double z = 0;
      for (int64_t j = 0; j < V; ++j) z += std::exp(in[0][i * V + j]);
      l += -std::log(std::exp(in[0][i * V + targets[i]]) / z) / N;
    }
    return Vec{l};
  };
  int64_t correct_ref = 0;
  for (int64_t i = 0; i < N; ++i)
    correct_ref +=
        std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) - (logits.begin() + i * V) == targets[i];
  FVec probs(N * V), dl = pre(N * V);
  int64_t correct = -1;
  const double loss = softmax_crossentropy_forward(probs.data(), &correct, logits.data(), targets.data(), N, V);
  EXPECT_NEAR(loss, f({dbl(logits)})[0], 1e-6 * std::abs(loss));
  EXPECT_EQ(correct, correct_ref);
  EXPECT_GT(correct_ref, 0);  // the accuracy check is not vacuous
  softmax_crossentropy_backward(dl.data(), probs.data(), targets.data(), 1.0f, N, V);
  EXPECT_TRUE(close("dlogits", minus_pre(dl), fd_grad(f, {dbl(logits)}, 0, Vec{1.0}), kTolGrad));
}

TEST(Ops, Mse) {
  const int64_t n = 13;
  const FVec p = randn(n, 17), t = randn(n, 18);
  auto f = [&](const std::vector<Vec>& in) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += (in[0][i] - in[1][i]) * (in[0][i] - in[1][i]) / n;
    return Vec{s};
  };
  const double l = mse_forward(p.data(), t.data(), n);
  EXPECT_NEAR(l, f({dbl(p), dbl(t)})[0], 1e-7 * l);
  FVec dp = pre(n);
  mse_backward(dp.data(), p.data(), t.data(), 1.0f, n);
  EXPECT_TRUE(close("dpred", minus_pre(dp), fd_grad(f, {dbl(p), dbl(t)}, 0, Vec{1.0}), kTolGrad));
}

// ---- embeddings -----------------------------------------------------------------------

TEST(Ops, Embedding) {
  const int64_t B = 2, T = 4, C = 3, V = 5;
  const std::vector<int32_t> ids = {1, 3, 1, 0, 4, 4, 2, 1};  // repeats: scatter-add
  const FVec wte = randn(V * C, 19), wpe = randn(T * C, 20), dout = randn(B * T * C, 21);
  auto f = [&](const std::vector<Vec>& in) {
    Vec o(B * T * C);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < C; ++c) o[(b * T + t) * C + c] = in[0][ids[b * T + t] * C + c] + in[1][t * C + c];
    return o;
  };
  const std::vector<Vec> in = {dbl(wte), dbl(wpe)};
  FVec out(B * T * C), dwte = pre(V * C), dwpe = pre(T * C);
  embedding_forward(out.data(), ids.data(), wte.data(), wpe.data(), B, T, C);
  EXPECT_TRUE(close("out", out, f(in), kTolF32));
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), ids.data(), B, T, C);
  EXPECT_TRUE(close("dwte", minus_pre(dwte), fd_grad(f, in, 0, dbl(dout)), kTolGrad));
  EXPECT_TRUE(close("dwpe", minus_pre(dwpe), fd_grad(f, in, 1, dbl(dout)), kTolGrad));
}

// Patch embedding = patchify + matmul equals a stride-p convolution with a (OC, Cin, p, p)
// kernel (PyTorch's Conv2d layout), computed directly here.
TEST(Ops, PatchEmbeddingIsStridedConvolution) {
  const int64_t B = 2, Cin = 3, Hh = 6, W = 4, p = 2, OC = 5, ph = Hh / p, pw = W / p, D = Cin * p * p;
  const FVec img = randn(B * Cin * Hh * W, 22), w = randn(OC * D, 23), bias = randn(OC, 24);
  FVec patches(B * ph * pw * D), out(B * ph * pw * OC);
  patchify(patches.data(), img.data(), B, Cin, Hh, W, p);
  matmul_forward(out.data(), patches.data(), w.data(), bias.data(), B * ph * pw, D, OC);
  Vec ref(out.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t o = 0; o < OC; ++o)
      for (int64_t py = 0; py < ph; ++py)
        for (int64_t px = 0; px < pw; ++px) {
          double s = bias[o];
          for (int64_t c = 0; c < Cin; ++c)
            for (int64_t y = 0; y < p; ++y)
              for (int64_t x = 0; x < p; ++x)
                s += static_cast<double>(w[((o * Cin + c) * p + y) * p + x]) *
                     img[((b * Cin + c) * Hh + py * p + y) * W + px * p + x];
          ref[((b * ph + py) * pw + px) * OC + o] = s;
        }
  EXPECT_TRUE(close("out", out, ref, kTolF32));
}

// ---- optimizers -------------------------------------------------------------------------

// PyTorch's AdamW, step by step as torch/optim/adamw.py writes it (decay first).
TEST(Ops, AdamW) {
  const int64_t n = 11;
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.1f;
  FVec p = randn(n, 25), m(n, 0.0f), v(n, 0.0f);
  Vec rp = dbl(p), rm(n, 0.0), rv(n, 0.0);
  for (int64_t t = 1; t <= 5; ++t) {
    const FVec g = randn(n, 100 + static_cast<uint32_t>(t));
    adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, b1, b2, eps, wd, t);
    for (int64_t i = 0; i < n; ++i) {
      rp[i] *= 1.0 - static_cast<double>(lr) * wd;
      rm[i] = b1 * rm[i] + (1.0 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1.0 - b2) * g[i] * g[i];
      const double bc1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(t));
      rp[i] -= lr / bc1 * rm[i] / (std::sqrt(rv[i]) / std::sqrt(bc2) + eps);
    }
  }
  EXPECT_TRUE(close("params", p, rp, 1e-6));
  EXPECT_TRUE(close("m", m, rm, 1e-6));
  EXPECT_TRUE(close("v", v, rv, 1e-6));
}

TEST(Ops, Sgd) {
  for (float mu : {0.0f, 0.9f}) {
    SCOPED_TRACE("momentum " + std::to_string(mu));
    const int64_t n = 9;
    const float lr = 0.1f, wd = 0.01f;
    FVec p = randn(n, 26), buf(n, 0.0f);
    Vec rp = dbl(p), rb(n, 0.0);
    for (int t = 1; t <= 4; ++t) {
      const FVec g = randn(n, 200 + t);
      sgd_update(p.data(), g.data(), mu != 0.0f ? buf.data() : nullptr, n, lr, mu, wd);
      for (int64_t i = 0; i < n; ++i) {  // torch.optim.SGD, dampening 0
        const double gi = g[i] + static_cast<double>(wd) * rp[i];
        rb[i] = t == 1 ? gi : mu * rb[i] + gi;
        rp[i] -= lr * (mu != 0.0f ? rb[i] : gi);
      }
    }
    EXPECT_TRUE(close("params", p, rp, 1e-6));
  }
}

}  // namespace
}  // namespace attnsweep
