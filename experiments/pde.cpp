#include "experiments/pde.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>

#include "experiments/registry.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "experiments/training_keys.h"

namespace attnsweep {

namespace {

constexpr int kModes = 32;
constexpr double kRms = 0.5;

// A such that E[mean of u0^2] = sum_k s_k^2 = kRms^2.
double amplitude() {
  double s = 0;
  for (int k = 1; k <= kModes; ++k) s += 625.0 / ((k * k + 25.0) * (k * k + 25.0));
  return kRms / std::sqrt(s);
}

double rel_l2(const std::vector<float>& pred, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t j = 0; j < ref.size(); ++j) {
    const double d = static_cast<double>(pred[j]) - ref[j];
    num += d * d;
    den += static_cast<double>(ref[j]) * ref[j];
  }
  return std::sqrt(num / den);
}

}  // namespace

FourierSeries pde_initial_condition(const PdeSpec& spec, int split, int64_t index) {
  Rng rng(seed_of({spec.data_seed, 0xB0B6E25ull, static_cast<uint64_t>(split), static_cast<uint64_t>(index)}));
  static const double A = amplitude();
  FourierSeries f;
  for (int k = 1; k <= kModes; ++k) {
    const double s = A * 25.0 / (k * k + 25.0);
    f.a.push_back(s * rng.normal());
    f.b.push_back(s * rng.normal());
  }
  return f;
}

PdeSample pde_sample(const PdeSpec& spec, int split, int64_t index) {
  const FourierSeries u0 = pde_initial_condition(spec, split, index);
  const BurgersSolution sol = burgers_solve_resolved(u0, spec.nu, spec.final_time);
  const std::vector<double> uT = sample_periodic(sol.modes, spec.grid);
  FourierSeries heat = u0;  // u_t = nu u_xx: mode k decays by exp(-nu k^2 T)
  for (size_t k = 1; k <= heat.a.size(); ++k) {
    const double decay = std::exp(-spec.nu * static_cast<double>(k * k) * spec.final_time);
    heat.a[k - 1] *= decay;
    heat.b[k - 1] *= decay;
  }
  PdeSample s;
  s.solver_grid = sol.grid;
  const size_t N = static_cast<size_t>(spec.grid);
  s.u0.resize(N);
  s.uT.resize(N);
  s.heat.resize(N);
  for (size_t j = 0; j < N; ++j) {
    const double x = 2.0 * M_PI * static_cast<double>(j) / static_cast<double>(N);
    s.u0[j] = static_cast<float>(u0(x));
    s.uT[j] = static_cast<float>(uT[j]);
    s.heat[j] = static_cast<float>(heat(x));
  }
  return s;
}

// The grid's prompt_length points, each (x, u(x, 0), nu) -> u(x, T): one target a token.
static DataShape pde_data_shape(const json& config) {
  DataShape s;
  s.tokens = config.at("prompt_length").get<int64_t>();
  s.in_dim = 3;
  s.targets_per_sample = s.tokens;
  return s;
}

TaskOutput run_pde(const json& config, const TaskContext& ctx) {
  PdeSpec spec;
  spec.grid = config.at("prompt_length").get<int64_t>();
  spec.nu = config.at("nu").get<double>();
  spec.final_time = config.at("final_time").get<double>();
  spec.data_seed = config.at("data_seed").get<uint64_t>();
  if (spec.grid < 4) throw std::runtime_error("prompt_length: the pde task needs at least 4 grid points");
  if (!(spec.nu > 0) || !(spec.final_time > 0)) throw std::runtime_error("pde: nu and final_time must be positive");
  if (!ctx.train) throw std::runtime_error("task pde: no trainer supplied (run it through attnsweep train)");

  TrainingData data;
  static_cast<DataShape&>(data) = pde_data_shape(config);  // tokens: spec.grid
  data.n_train = config.at("n_train").get<int64_t>();
  data.n_test = config.at("n_test").get<int64_t>();

  // Every sample solved once, up front (about 15 ms of CPU each at the defaults),
  // in parallel: each is a pure function of (spec, split, index).
  struct Split {
    std::vector<float> x, y;  // [n, N, 3], [n, N]
  };
  auto splits = std::make_shared<std::array<Split, 2>>();
  const int64_t N = spec.grid, count[2] = {data.n_train, data.n_test};
  std::vector<double> heat_err(static_cast<size_t>(data.n_test));
  std::vector<int64_t> solver_grid(static_cast<size_t>(data.n_train + data.n_test));
  for (int s = 0; s < 2; ++s) {
    Split& sp = (*splits)[static_cast<size_t>(s)];
    sp.x.resize(static_cast<size_t>(count[s] * N * 3));
    sp.y.resize(static_cast<size_t>(count[s] * N));
    std::string error;
#pragma omp parallel for schedule(dynamic, 4)
    for (int64_t i = 0; i < count[s]; ++i) {
      if (ctx.stop_requested()) continue;  // a signal: stop solving (below)
      PdeSample smp;
      try {
        smp = pde_sample(spec, s, i);
      } catch (const std::exception& e) {
#pragma omp critical
        error = e.what();
        continue;
      }
      for (int64_t j = 0; j < N; ++j) {
        const double xj = 2.0 * M_PI * static_cast<double>(j) / static_cast<double>(N);
        float* tok = sp.x.data() + (i * N + j) * 3;
        tok[0] = smp.u0[static_cast<size_t>(j)];
        tok[1] = static_cast<float>(std::sin(xj));
        tok[2] = static_cast<float>(std::cos(xj));
        sp.y[static_cast<size_t>(i * N + j)] = smp.uT[static_cast<size_t>(j)];
      }
      if (s == 1) heat_err[static_cast<size_t>(i)] = rel_l2(smp.heat, smp.uT);
      solver_grid[static_cast<size_t>(s * data.n_train + i)] = smp.solver_grid;
    }
    if (!error.empty()) throw std::runtime_error("pde: " + error);
    // Solving takes up to a minute: a stop (preemption, Ctrl-C) that comes meanwhile ends
    // the cell at once as interrupted (exit 75; there is nothing to checkpoint yet).
    if (ctx.stop_requested()) {
      TaskOutput stopped;
      stopped.status = CellStatus::interrupted;
      return stopped;
    }
  }
  data.fill = [splits, N](int split, const int64_t* idx, int64_t cnt, float* x, int32_t*, float* y_value) {
    const Split& sp = (*splits)[static_cast<size_t>(split)];
    for (int64_t i = 0; i < cnt; ++i) {
      std::copy_n(sp.x.data() + idx[i] * N * 3, N * 3, x + i * N * 3);
      std::copy_n(sp.y.data() + idx[i] * N, N, y_value + i * N);
    }
  };
  TaskOutput out = ctx.train(config, ctx, data);
  double heat = 0;
  for (double e : heat_err) heat += e;
  out.final_metrics["heat_rel_l2"] = heat / static_cast<double>(std::max<int64_t>(data.n_test, 1));
  int64_t finest = 0;
  for (int64_t g : solver_grid) finest = std::max(finest, g);
  out.final_metrics["solver_grid_max"] = static_cast<double>(finest);
  return out;
}

const TaskDef& pde_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "pde";
    d.description = "Burgers' solution operator u(., 0) -> u(., T) on N grid points (tokens)";
    d.min_prompt_length = 4;
    d.min_prompt_why = "at least 4 grid points";
    d.max_prompt_length = 8192;
    d.model = TaskModel::transformer;
    d.target = TaskTarget::per_token;
    d.keys = {seed_following_key("data_seed", "seed of the generated train and test samples"),
              integer_key("n_train", 1, 1e9, 1000, "training samples"),
              integer_key("n_test", 1, 1e9, 200, "test samples, fixed per data_seed"),
              number_key("nu", 0.01, 100, 0.1, "viscosity of Burgers' equation u_t + u u_x = nu u_xx"),
              number_key("final_time", 1e-6, 100, 1.0, "T of the operator u(., 0) -> u(., T)")};
    // Training, plus each sample's Burgers solve: ~15 ms at nu = 0.1, T = 1.
    d.cost_s = [](const json& c) {
      return transformer_cost_s(c, c.at("n_test").get<double>()) +
             0.015 * (c.at("n_train").get<double>() + c.at("n_test").get<double>()) * c.at("final_time").get<double>() *
                 std::sqrt(0.1 / c.at("nu").get<double>());
    };
    d.data_shape = pde_data_shape;
    d.outputs = {
        make_final_metric("heat_rel_l2", "mean relative L2 error of the heat equation's solution on the test split"),
        make_final_metric("solver_grid_max", "finest grid the reference Burgers solver needed over the samples")};
    d.run = run_pde;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
