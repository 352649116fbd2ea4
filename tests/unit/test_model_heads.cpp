// worker/model: the padding mask (a padded batch gives the loss and gradients of the
// same batch with less padding, for every activation, CLS or masked mean pool) and the
// token_regress head; both backwards against central finite differences of the forward.
// The float64 PyTorch comparison of both is tests/integration/trainer_torch.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/grid.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "worker/model/model.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {

struct Act {
  const char* name;
  ActivationSpec spec;
};
std::vector<Act> activations() {
  ActivationSpec soft, poly3, relu, sig;
  poly3.activation = Activation::poly;
  poly3.degree = 3;
  poly3.scale = ScaleKind::inv_sqrt_n;
  relu.activation = Activation::relu;
  relu.scale = ScaleKind::inv_n;
  sig.activation = Activation::sigmoid;
  return {{"softmax", soft}, {"poly3_inv_sqrt_n", poly3}, {"relu_inv_n", relu}, {"sigmoid", sig}};
}

ModelConfig token_classifier(const ActivationSpec& act, int64_t tokens, bool cls, int64_t pad_id) {
  ModelConfig mc;
  mc.head = Head::classify;
  mc.tokens = tokens;
  mc.in_dim = 1;
  mc.vocab = 16;
  mc.pad_id = pad_id;
  mc.dim = 16;
  mc.layers = 2;
  mc.heads = 2;
  mc.mlp_ratio = 2;
  mc.classes = 10;
  mc.cls = cls;
  mc.act = act;
  return mc;
}

const TensorInfo& tensor(const Model& m, const std::string& name) {
  for (const auto& t : m.tensors())
    if (t.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// dst gets src's parameters; wpe (T, C) only in its first rows when dst is longer.
void copy_params(Model& dst, const Model& src) {
  for (const auto& ts : src.tensors()) {
    const TensorInfo& td = tensor(dst, ts.name);
    ASSERT_TRUE(ts.name == "wpe" || td.size == ts.size) << ts.name;
    std::memcpy(dst.params() + td.offset, src.params() + ts.offset,
                static_cast<size_t>(std::min(ts.size, td.size)) * sizeof(float));
  }
}

// max |a - b| over max |b| (b nonzero somewhere).
double rel_diff(const float* a, const float* b, int64_t n) {
  double e = 0, m = 0;
  for (int64_t i = 0; i < n; ++i) {
    e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0 ? e / m : e;
}

// Three expressions of 5, 9 and 12 tokens (ids 1..15), padded with 0 to `tokens`.
std::vector<float> padded_batch(int64_t tokens) {
  const int64_t lengths[3] = {5, 9, 12};
  std::vector<float> x(static_cast<size_t>(3 * tokens), 0.0f);
  Rng rng(99);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < lengths[b]; ++t)
      x[static_cast<size_t>(b * tokens + t)] = static_cast<float>(1 + static_cast<int>(rng.uniform() * 15));
  return x;
}

TEST(ModelMask, PaddedBatchGivesTheLossAndGradientsOfTheShorterOne) {
  const std::vector<int32_t> y = {3, 7, 1};
  for (const Act& a : activations())
    for (bool cls : {true, false}) {
      SCOPED_TRACE(std::string(a.name) + (cls ? " cls" : " mean pool"));
      Model short_m(token_classifier(a.spec, 12, cls, 0)), long_m(token_classifier(a.spec, 20, cls, 0));
      short_m.init(3, 0.0);
      long_m.init(4, 0.0);  // other positions 12..19; the rest copied
      copy_params(long_m, short_m);
      const auto xs = padded_batch(12), xl = padded_batch(20);
      const ForwardStats fs = short_m.forward(xs.data(), y.data(), nullptr, 3, true);
      const ForwardStats fl = long_m.forward(xl.data(), y.data(), nullptr, 3, true);
      ASSERT_NE(long_m.key_mask(), nullptr);
      // seen: ~1e-7 (different kernel tilings of the key axis)
      EXPECT_NEAR(fl.loss, fs.loss, 1e-5 * fs.loss);
      EXPECT_LT(rel_diff(long_m.predictions(), short_m.predictions(), 3 * 10), 1e-5);
      for (size_t i = 0; i < fs.attn_fro.size(); ++i) {
        EXPECT_NEAR(fl.attn_fro[i], fs.attn_fro[i], 1e-5 * fs.attn_fro[i]) << "norm " << i;
        EXPECT_NEAR(fl.jac_fro[i], fs.jac_fro[i], 1e-5 * fs.jac_fro[i] + 1e-12) << "norm " << i;
      }
      short_m.backward();
      long_m.backward();
      for (const auto& ts : short_m.tensors()) {
        if (ts.size == 0) continue;
        const TensorInfo& tl = tensor(long_m, ts.name);
        EXPECT_LT(rel_diff(long_m.grads() + tl.offset, short_m.grads() + ts.offset, ts.size), 1e-4) << ts.name;
        if (ts.name == "wpe") {  // positions past every expression get no gradient at all
          for (int64_t i = ts.size; i < tl.size; ++i) ASSERT_EQ(long_m.grads()[tl.offset + i], 0.0f) << i;
        }
      }
    }
}

TEST(ModelMask, WithoutTheMaskPaddingChangesTheOutput) {
  // The control for the test above: the same two models with pad_id -1 attend to the
  // padding, and the longer padding changes the logits.
  const std::vector<int32_t> y = {3, 7, 1};
  Model short_m(token_classifier(activations()[0].spec, 12, true, -1)),
      long_m(token_classifier(activations()[0].spec, 20, true, -1));
  short_m.init(3, 0.0);
  long_m.init(4, 0.0);
  copy_params(long_m, short_m);
  const auto xs = padded_batch(12), xl = padded_batch(20);
  short_m.forward(xs.data(), y.data(), nullptr, 3, false);
  long_m.forward(xl.data(), y.data(), nullptr, 3, false);
  EXPECT_EQ(long_m.key_mask(), nullptr);
  EXPECT_GT(rel_diff(long_m.predictions(), short_m.predictions(), 3 * 10), 1e-3);
}

TEST(ModelMask, ConfigErrors) {
  ModelConfig mc = token_classifier(ActivationSpec{}, 8, true, 16);  // pad_id outside the vocabulary
  EXPECT_THROW(Model{mc}, std::runtime_error);
  mc.pad_id = 0;
  mc.head = Head::token_regress;  // no CLS, no padding for per-token regression
  EXPECT_THROW(Model{mc}, std::runtime_error);
}

// Central differences of the float32 forward along unit directions u of one tensor
// (the gradient's own direction and a random one): (L(p + h u) - L(p - h u)) / 2h
// against g . u. The error allowed, 2 % of |g| + 2e-4, covers float32 rounding of the
// loss (~1e-7 / h = 3e-5) and the O(h^2) truncation; a wrong term in a backward shows
// as an error of the order of |g| itself.
void expect_gradients_match_differences(Model& m, const float* x, const int32_t* yc, const float* yv, int64_t B) {
  m.forward(x, yc, yv, B, false);
  m.backward();
  const std::vector<float> grads(m.grads(), m.grads() + m.num_params());
  const double h = 3e-3;
  Rng rng(17);
  for (const auto& t : m.tensors()) {
    if (t.size == 0) continue;
    double gnorm = 0;
    for (int64_t i = 0; i < t.size; ++i)
      gnorm += static_cast<double>(grads[static_cast<size_t>(t.offset + i)]) * grads[static_cast<size_t>(t.offset + i)];
    gnorm = std::sqrt(gnorm);
    for (int dir = 0; dir < 2; ++dir) {
      std::vector<double> u(static_cast<size_t>(t.size));
      double un = 0;
      for (int64_t i = 0; i < t.size; ++i) {
        u[static_cast<size_t>(i)] = dir == 0 && gnorm > 0 ? grads[static_cast<size_t>(t.offset + i)] : rng.normal();
        un += u[static_cast<size_t>(i)] * u[static_cast<size_t>(i)];
      }
      double gu = 0;
      for (int64_t i = 0; i < t.size; ++i) {
        u[static_cast<size_t>(i)] /= std::sqrt(un);
        gu += u[static_cast<size_t>(i)] * grads[static_cast<size_t>(t.offset + i)];
      }
      std::vector<float> saved(m.params() + t.offset, m.params() + t.offset + t.size);
      auto loss_at = [&](double s) {
        for (int64_t i = 0; i < t.size; ++i)
          m.params()[t.offset + i] = static_cast<float>(saved[static_cast<size_t>(i)] + s * u[static_cast<size_t>(i)]);
        return m.forward(x, yc, yv, B, false).loss;
      };
      const double fd = (loss_at(h) - loss_at(-h)) / (2 * h);
      std::copy(saved.begin(), saved.end(), m.params() + t.offset);
      EXPECT_NEAR(fd, gu, 0.02 * gnorm + 2e-4)
          << t.name << (dir == 0 ? " along its gradient" : " along a random direction");
    }
  }
}

TEST(ModelTokenRegress, GradientsMatchFiniteDifferences) {
  for (const Act& a : activations()) {
    SCOPED_TRACE(a.name);
    ModelConfig mc;
    mc.head = Head::token_regress;
    mc.tokens = 7;
    mc.in_dim = 3;
    mc.dim = 8;
    mc.layers = 2;
    mc.heads = 2;
    mc.mlp_ratio = 2;
    mc.act = a.spec;
    Model m(mc);
    m.init(5, 0.0);
    const int64_t B = 3;
    Rng rng(8);
    std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim)), y(static_cast<size_t>(B * mc.tokens));
    for (float& v : x) v = static_cast<float>(rng.normal());
    for (float& v : y) v = static_cast<float>(rng.normal());
    const ForwardStats st = m.forward(x.data(), nullptr, y.data(), B, false);
    // The loss is the mean over all B N tokens of (pred - y)^2.
    double mse = 0;
    for (int64_t i = 0; i < B * mc.tokens; ++i) mse += std::pow(m.predictions()[i] - y[static_cast<size_t>(i)], 2);
    EXPECT_NEAR(st.loss, mse / static_cast<double>(B * mc.tokens), 1e-6 * st.loss);
    expect_gradients_match_differences(m, x.data(), nullptr, y.data(), B);
  }
}

TEST(ModelMask, GradientsMatchFiniteDifferences) {
  for (const Act& a : activations())
    for (bool cls : {true, false}) {
      SCOPED_TRACE(std::string(a.name) + (cls ? " cls" : " mean pool"));
      Model m(token_classifier(a.spec, 12, cls, 0));
      m.init(6, 0.0);
      const auto x = padded_batch(12);
      const std::vector<int32_t> y = {3, 7, 1};
      expect_gradients_match_differences(m, x.data(), y.data(), nullptr, 3);
    }
}

// Data parallelism with one target per token: each replica must read its own rows of
// y_value [B, N] (replica r starts at row r B/k, float r B/k N).
TEST(ModelTokenRegress, TwoDevicesMatchOne) {
  TrainingData shape;
  shape.tokens = 6;
  shape.in_dim = 3;
  shape.targets_per_sample = 6;
  const json c = {{"dim", 8}, {"layers", 1}, {"heads", 2}, {"mlp_ratio", 2}, {"activation", "softmax"}};
  const ModelConfig mc = model_config_of(c, shape);
  ASSERT_EQ(mc.head, Head::token_regress);
  TrainConfig tc;
  tc.batch = 4;
  tc.steps = 3;
  tc.warmup_steps = 1;
  const int64_t B = 4;
  Rng rng(2);
  std::vector<float> x(static_cast<size_t>(B * 6 * 3)), y(static_cast<size_t>(B * 6));
  for (float& v : x) v = static_cast<float>(rng.normal());
  for (float& v : y) v = static_cast<float>(rng.normal());
  std::vector<double> loss[2];
  for (int64_t k : {1, 2}) {
    tc.devices = k;
    Trainer tr(mc, tc);
    for (int64_t s = 0; s < 3; ++s) loss[k - 1].push_back(tr.step(x.data(), nullptr, y.data(), B, s, false).fwd.loss);
  }
  for (size_t s = 0; s < 3; ++s) EXPECT_NEAR(loss[1][s], loss[0][s], 1e-5 * loss[0][s]) << "step " << s;
  TrainingData bad = shape;
  bad.targets_per_sample = 4;
  EXPECT_THROW(model_config_of(c, bad), std::runtime_error);
}

}  // namespace
}  // namespace attnsweep

namespace attnsweep {
namespace {

// test_rel_l2 of train_cell = the mean over test samples of ||pred - y|| / ||y||,
// recomputed here from a model with the same initial weights (steps = 0: no update).
TEST(ModelTokenRegress, TestRelL2IsTheMeanRelativeErrorPerSample) {
  TrainingData data;
  data.n_train = 8;
  data.n_test = 10;  // two eval batches of 8 and 2
  data.tokens = 5;
  data.in_dim = 2;
  data.targets_per_sample = 5;
  data.fill = [](int split, const int64_t* idx, int64_t count, float* x, int32_t*, float* y) {
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), static_cast<uint64_t>(idx[i])}));
      for (int64_t j = 0; j < 10; ++j) x[i * 10 + j] = static_cast<float>(rng.normal());
      for (int64_t j = 0; j < 5; ++j)
        y[i * 5 + j] = static_cast<float>(rng.normal() + 0.1 * static_cast<double>(idx[i]));
    }
  };
  // A pde cell's effective config (the trainer reads every training key from it).
  const json c = effective_config({{"task", "pde"},
                                   {"prompt_length", 5},
                                   {"dim", 8},
                                   {"layers", 1},
                                   {"heads", 2},
                                   {"mlp_ratio", 2},
                                   {"activation", "softmax"},
                                   {"steps", 0},
                                   {"batch", 8},
                                   {"init_seed", 3},
                                   {"eval_every", 0}},
                                  "token_regress");
  TaskContext ctx;
  const TaskOutput out = train_cell(c, ctx, data);
  ASSERT_TRUE(out.final_metrics.count("test_rel_l2"));
  Model m(model_config_of(c, data));
  m.init(3, 0.0);
  std::vector<float> x(10 * 10), y(10 * 5);
  std::vector<int64_t> idx(10);
  for (int64_t i = 0; i < 10; ++i) idx[static_cast<size_t>(i)] = i;
  data.fill(1, idx.data(), 10, x.data(), nullptr, y.data());
  m.forward(x.data(), nullptr, y.data(), 10, false);
  double mean = 0;
  for (int64_t b = 0; b < 10; ++b) {
    double num = 0, den = 0;
    for (int64_t j = 0; j < 5; ++j) {
      num += std::pow(m.predictions()[b * 5 + j] - y[static_cast<size_t>(b * 5 + j)], 2);
      den += std::pow(y[static_cast<size_t>(b * 5 + j)], 2);
    }
    mean += std::sqrt(num / den) / 10;
  }
  EXPECT_NEAR(out.final_metrics.at("test_rel_l2"), mean, 1e-6 * mean);
  EXPECT_GT(mean, 0.1);
}

}  // namespace
}  // namespace attnsweep
