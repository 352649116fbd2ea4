// Shared by the trainer tests (test_trainer.cpp on CPU, test_trainer_cuda.cpp, and the
// icl_regression ones): the synthetic task, the tiny cell config, a small icl_regression
// cell, bit-for-bit comparison of task outputs and a saved environment variable.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

#include "coordinator/grid.h"
#include "experiments/rng.h"
#include "experiments/task.h"

namespace attnsweep {

using json = nlohmann::json;

// 3 classes, 8 tokens of 4 features; the label is the argmax of three fixed linear
// read-outs, so a model can learn it. Samples are a function of (split, index) only.
// `on_fill` (may be null) sees the number of training fills so far.
inline TrainingData synthetic_data(std::function<void(int64_t)> on_fill = nullptr) {
  TrainingData d;
  d.n_train = 512;
  d.n_test = 96;
  d.tokens = 8;
  d.in_dim = 4;
  d.classes = 3;
  auto fills = std::make_shared<int64_t>(0);
  d.fill = [d, fills, on_fill](int split, const int64_t* idx, int64_t count, float* x, int32_t* yc, float*) {
    const int64_t per = d.tokens * d.in_dim;
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), static_cast<uint64_t>(idx[i])}));
      double score[3] = {0, 0, 0};
      for (int64_t j = 0; j < per; ++j) {
        const double v = rng.normal();
        x[i * per + j] = static_cast<float>(v);
        score[j % 3] += v * (j % 2 ? 1.0 : -0.5);
      }
      yc[i] = static_cast<int32_t>(std::max_element(score, score + 3) - score);
    }
    if (split == 0 && on_fill) on_fill((*fills)++);
  };
  return d;
}

// An image cell's effective config (every training key there, as the trainer expects);
// the trainer ignores its prompt_length and takes the token count from the data.
inline json tiny_config() {
  return effective_config(
      json{{"task", "image"}, {"prompt_length", 16},  {"activation", "softmax"}, {"dim", 16},
           {"layers", 2},     {"heads", 2},           {"mlp_ratio", 2},          {"steps", 24},
           {"batch", 8},      {"lr", 3e-3},           {"warmup_steps", 4},       {"clip", 1.0},
           {"log_every", 3},  {"eval_every", 10},     {"eval_batches", 0},       {"seed", 5},
           {"init_seed", 1},  {"optimizer", "adamw"}, {"weight_decay", 0.05},    {"checkpoint_every", 0}},
      "tiny_config");
}

// Bit-for-bit equality of two task outputs (NaN == NaN when the bits agree).
inline void expect_identical(const TaskOutput& a, const TaskOutput& b) {
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.diverged_at_step, b.diverged_at_step);
  ASSERT_EQ(a.final_metrics.size(), b.final_metrics.size());
  for (const auto& [k, v] : a.final_metrics) {
    ASSERT_TRUE(b.final_metrics.count(k)) << k;
    EXPECT_EQ(std::memcmp(&v, &b.final_metrics.at(k), sizeof v), 0)
        << k << ": " << v << " vs " << b.final_metrics.at(k);
  }
  ASSERT_EQ(a.series.size(), b.series.size());
  for (size_t i = 0; i < a.series.size(); ++i) {
    EXPECT_EQ(a.series[i].path, b.series[i].path);
    EXPECT_EQ(a.series[i].shape, b.series[i].shape) << a.series[i].path;
    std::visit(
        [&](const auto& va) {
          using V = std::decay_t<decltype(va)>;
          ASSERT_TRUE(std::holds_alternative<V>(b.series[i].data)) << a.series[i].path;
          const V& vb = std::get<V>(b.series[i].data);
          ASSERT_EQ(va.size(), vb.size()) << a.series[i].path;
          if (!va.empty()) {  // an empty vector's data() may be null, which memcmp must not see
            EXPECT_EQ(std::memcmp(va.data(), vb.data(), va.size() * sizeof(va[0])), 0) << a.series[i].path;
          }
        },
        a.series[i].data);
  }
}

// Saves an environment variable and restores it when the test ends.
struct EnvGuard {
  std::string name;
  std::optional<std::string> old;
  explicit EnvGuard(std::string n) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
  }
  ~EnvGuard() {
    if (old)
      ::setenv(name.c_str(), old->c_str(), 1);
    else
      ::unsetenv(name.c_str());
  }
};

// Paper B's in-context regression (experiments/icl_regression.h), small: L = 24, d = 5,
// the read-out at init_std 0.3, SGD, no steps (set them).
inline json icl_cell(const std::string& act) {
  return json{{"task", "icl_regression"},
              {"activation", act},
              {"prompt_length", 24},
              {"d", 5},
              {"rho", 0.5},
              {"noise_var", 0.1},
              {"seed", 3},
              {"init_seed", 4},
              {"init_std", 0.3},
              {"steps", 0},
              {"batch", 16},
              {"lr", 1e-2},
              {"optimizer", "sgd"},
              {"lr_schedule", "constant"},
              {"warmup_steps", 0},
              {"clip", 0.0},
              {"weight_decay", 0.0},
              {"log_every", 5},
              {"eval_every", 10},
              {"eval_batches", 0},
              {"checkpoint_every", 0},
              {"train_prompts", 4096},
              {"test_prompts", 64},
              {"devices", 1}};
}

inline const TaskSeries& series(const TaskOutput& o, const std::string& p) {
  for (const auto& s : o.series)
    if (s.path == p) return s;
  throw std::runtime_error("no series " + p);
}

}  // namespace attnsweep
