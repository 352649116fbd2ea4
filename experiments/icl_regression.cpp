// prompt_rows below hands 32-byte vectors to icl_token (experiments/icl_prompt_math.h) in
// its default clone too, compiled without AVX. Every function that takes or returns one is
// inlined, so GCC's ABI warning (given where they are defined, and at the end of the file
// where the templates are instantiated) has no call to be about: off for the whole file.
#pragma GCC diagnostic ignored "-Wpsabi"

#include "experiments/icl_regression.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>

#include "experiments/icl_prompt_math.h"
#include "experiments/normals.h"
#include "experiments/registry.h"
#include "experiments/result_schema.h"
#include "experiments/rng.h"

namespace attnsweep {

IclSetup make_icl_setup(int64_t d, int64_t prompt_length, double rho, double noise_var, uint64_t seed) {
  if (d < 1 || d > kIclMaxD)
    throw InputError({"d: expected an integer in [1, " + std::to_string(kIclMaxD) + "], got " + std::to_string(d)});
  if (prompt_length < 1)
    throw InputError({"prompt_length: expected an integer >= 1, got " + std::to_string(prompt_length)});
  if (!(noise_var >= 0)) throw InputError({"noise_var: expected a number >= 0"});
  IclSetup s;
  s.d = d;
  s.prompt_length = prompt_length;
  s.rho = rho;
  s.noise_var = noise_var;
  s.seed = seed;
  const auto ud = static_cast<size_t>(d);
  s.sigma.assign(ud * ud, 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j)
      s.sigma[static_cast<size_t>(i * d + j)] = std::pow(rho, static_cast<double>(std::llabs(i - j)));
  // Cholesky-Banachiewicz: Sigma = chol chol^T.
  s.chol.assign(ud * ud, 0.0);
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      double acc = s.sigma[static_cast<size_t>(i * d + j)];
      for (int64_t k = 0; k < j; ++k)
        acc -= s.chol[static_cast<size_t>(i * d + k)] * s.chol[static_cast<size_t>(j * d + k)];
      if (i == j) {
        if (!(acc > 0))
          throw InputError(
              {"rho: Sigma_ij = rho^|i-j| with rho = " + std::to_string(rho) + " is not positive definite"});
        s.chol[static_cast<size_t>(i * d + i)] = std::sqrt(acc);
      } else {
        s.chol[static_cast<size_t>(i * d + j)] = acc / s.chol[static_cast<size_t>(j * d + j)];
      }
    }
  s.chol_f.assign(s.chol.begin(), s.chol.end());
  return s;
}

IclSetup icl_setup_of(const json& c) {
  return make_icl_setup(c.at("d").get<int64_t>(), c.at("prompt_length").get<int64_t>(), c.at("rho").get<double>(),
                        c.at("noise_var").get<double>(), c.at("seed").get<uint64_t>());
}

float icl_w_sd(const IclSetup& s) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.d)));
}
float icl_noise_sd(const IclSetup& s) {
  return static_cast<float>(std::sqrt(s.noise_var));
}

uint64_t icl_prompt_key(const IclSetup& s, int split) {
  return seed_of({s.seed, 0x1C1ull, static_cast<uint64_t>(split)});
}

#ifdef ATTNSWEEP_HAVE_CUDA
IclPromptsCuda icl_prompts_cuda_args(const IclSetup& s, int split) {
  IclPromptsCuda a;
  a.d = s.d;
  a.L = s.prompt_length;
  a.key = icl_prompt_key(s, split);
  a.w_sd = icl_w_sd(s);
  a.noise_sd = icl_noise_sd(s);
  std::copy(s.chol_f.begin(), s.chol_f.end(), a.chol);
  return a;
}
#endif

namespace {

// Each token's x = chol g and y = w^T x + noise_sd eps (icl_token), 8 tokens a vector, then
// one at a time: g [d, T] and x [d, T] row k = coordinate k of every token. The same bits
// on either clone and for either width (experiments/icl_prompt_math.h).
#if defined(__clang__)
#define ICL_CLONES
#else
#define ICL_CLONES __attribute__((target_clones("avx2", "default")))
#endif
typedef float f32x8 __attribute__((vector_size(32)));
template <class F>
struct TokensAt {  // row i of g at tokens t .. t + lanes - 1
  const float* g;
  int64_t T, t;
  [[gnu::always_inline]] F operator()(int64_t i) const {
    F v;
    std::memcpy(&v, g + i * T + t, sizeof v);
    return v;
  }
};
template <class F>
[[gnu::always_inline]] inline void tokens_at(const float* chol, const float* w, float noise_sd, const float* g,
                                             const float* eps, int64_t d, int64_t T, int64_t t, float* x, float* y) {
  F e, xs[kIclMaxD];
  std::memcpy(&e, eps + t, sizeof e);
  const F yt = icl_token<F>(chol, w, noise_sd, d, TokensAt<F>{g, T, t}, e, xs);
  for (int64_t k = 0; k < d; ++k) std::memcpy(x + k * T + t, &xs[k], sizeof(F));
  std::memcpy(y + t, &yt, sizeof(F));
}
ICL_CLONES void prompt_rows(const float* chol, const float* w, float noise_sd, const float* g, const float* eps,
                            int64_t d, int64_t T, float* x, float* y) {
  int64_t t = 0;
  for (; t + 8 <= T; t += 8) tokens_at<f32x8>(chol, w, noise_sd, g, eps, d, T, t, x, y);
  for (; t < T; ++t) tokens_at<float>(chol, w, noise_sd, g, eps, d, T, t, x, y);
}

}  // namespace

void icl_prompt_tokens(const IclSetup& s, int split, int64_t index, float* tokens, float* target, float* w,
                       std::vector<float>& scratch) {
  const int64_t d = s.d, C = d + 1, L = s.prompt_length, T = L + 1;
  const IclDraws draws{d, T};
  scratch.resize(static_cast<size_t>(draws.count() + d * T + T));
  float* z = scratch.data();
  philox_normals(icl_prompt_key(s, split), static_cast<uint64_t>(index), z, draws.count());
  float* x = z + draws.count();  // [d, T]
  float* y = x + d * T;          // [T]
  const float w_sd = icl_w_sd(s);
  float wv[kIclMaxD];
  for (int64_t k = 0; k < d; ++k) wv[k] = w_sd * z[draws.w(k)];
  prompt_rows(s.chol_f.data(), wv, icl_noise_sd(s), z + draws.g(0, 0), z + draws.eps(0), d, T, x, y);
  for (int64_t t = 0; t < T; ++t) {
    float* tok = tokens + t * C;
    for (int64_t k = 0; k < d; ++k) tok[k] = x[k * T + t];
    tok[d] = t < L ? y[t] : 0.0f;  // the query's y coordinate stays 0
  }
  *target = y[L];
  if (w) std::copy(wv, wv + d, w);
}

void icl_prompt(const IclSetup& s, int split, int64_t index, IclPrompt& out) {
  const int64_t d = s.d, C = d + 1, L = s.prompt_length;
  std::vector<float> tokens(static_cast<size_t>((L + 1) * C)), w(static_cast<size_t>(d)), scratch;
  float target = 0;
  icl_prompt_tokens(s, split, index, tokens.data(), &target, w.data(), scratch);
  out.w.assign(w.begin(), w.end());
  out.tokens.assign(tokens.begin(), tokens.end());
  out.target = target;
}

std::vector<double> icl_token_covariance(const IclSetup& s, const double* w) {
  const int64_t d = s.d, C = d + 1;
  std::vector<double> g(static_cast<size_t>(C * C), 0.0);
  std::vector<double> sw(static_cast<size_t>(d), 0.0);  // Sigma w
  for (int64_t i = 0; i < d; ++i)
    for (int64_t j = 0; j < d; ++j) sw[static_cast<size_t>(i)] += s.sigma[static_cast<size_t>(i * d + j)] * w[j];
  double wsw = 0;
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j < d; ++j) g[static_cast<size_t>(i * C + j)] = s.sigma[static_cast<size_t>(i * d + j)];
    g[static_cast<size_t>(i * C + d)] = g[static_cast<size_t>(d * C + i)] = sw[static_cast<size_t>(i)];
    wsw += w[i] * sw[static_cast<size_t>(i)];
  }
  g[static_cast<size_t>(d * C + d)] = wsw + s.noise_var;
  return g;
}

ReadoutWeights readout_weights(const ModelWeights& weights) {
  auto it = weights.tensors.find("qkv_w");
  if (it == weights.tensors.end()) throw InternalError("icl_regression: the model has no qkv_w");
  const auto& sh = it->second.shape;
  if (sh.size() != 3 || sh[0] != 1 || sh[1] != 3 * sh[2])
    throw InternalError("icl_regression: qkv_w is not the read-out's (1, 3C, C)");
  ReadoutWeights W;
  W.C = sh[2];
  const size_t n = static_cast<size_t>(W.C * W.C);
  const float* p = it->second.data;
  W.Q.assign(p, p + n);
  W.K.assign(p + n, p + 2 * n);
  W.V.assign(p + 2 * n, p + 3 * n);
  return W;
}

namespace {

// a = K^T Q z / sqrt(C): the score of token x is <x, a>.
std::vector<double> score_direction(const ReadoutWeights& W, const double* z) {
  const int64_t C = W.C;
  std::vector<double> q(static_cast<size_t>(C), 0.0), a(static_cast<size_t>(C), 0.0);
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < C; ++j) q[static_cast<size_t>(i)] += W.Q[static_cast<size_t>(i * C + j)] * z[j];
  const double inv_sqrt_c = 1.0 / std::sqrt(static_cast<double>(C));
  for (int64_t i = 0; i < C; ++i)
    for (int64_t j = 0; j < C; ++j)
      a[static_cast<size_t>(j)] += W.K[static_cast<size_t>(i * C + j)] * q[static_cast<size_t>(i)] * inv_sqrt_c;
  return a;
}

void apply(const std::vector<double>& M, int64_t C, const double* x, double* out) {
  for (int64_t i = 0; i < C; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) acc += M[static_cast<size_t>(i * C + j)] * x[j];
    out[i] = acc;
  }
}

}  // namespace

void readout_attention_output(const ActivationSpec& act, const ReadoutWeights& W, const double* tokens, int64_t L,
                              double* out) {
  const int64_t C = W.C;
  const std::vector<double> a = score_direction(W, tokens + L * C);
  std::vector<double> s(static_cast<size_t>(L)), phi(static_cast<size_t>(L));
  for (int64_t i = 0; i < L; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) acc += tokens[i * C + j] * a[static_cast<size_t>(j)];
    s[static_cast<size_t>(i)] = acc;
  }
  if (act.activation == Activation::softmax) {
    double m = s[0], z = 0;
    for (double v : s) m = std::max(m, v);
    for (int64_t i = 0; i < L; ++i) z += phi[static_cast<size_t>(i)] = std::exp(s[static_cast<size_t>(i)] - m);
    for (double& p : phi) p /= z;
  } else {
    const PhiParams pp = resolve_phi(act, L);
    for (int64_t i = 0; i < L; ++i)
      phi[static_cast<size_t>(i)] = phi_elementwise<double>(pp, s[static_cast<size_t>(i)]);
  }
  std::vector<double> mix(static_cast<size_t>(C), 0.0);  // sum_i phi_i x_i, then V applied once
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < C; ++j) mix[static_cast<size_t>(j)] += phi[static_cast<size_t>(i)] * tokens[i * C + j];
  apply(W.V, C, mix.data(), out);
}

bool icl_limit_defined(const ActivationSpec& act) {
  switch (act.activation) {
    case Activation::softmax: return true;
    case Activation::poly:
    case Activation::relu: return act.scale == ScaleKind::inv_n;
    default: return false;
  }
}

void readout_limit_output(const ActivationSpec& act, const ReadoutWeights& W, const double* gamma, const double* z,
                          double* out) {
  if (!icl_limit_defined(act)) throw InternalError("icl_regression: no large-prompt limit for this activation");
  const int64_t C = W.C;
  const std::vector<double> a = score_direction(W, z);
  std::vector<double> ga(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < C; ++j) acc += gamma[i * C + j] * a[static_cast<size_t>(j)];
    ga[static_cast<size_t>(i)] = acc;
  }
  // E[x phi(x^T a)] for x ~ N(0, Gamma) = Gamma a E[phi'(x^T a)] (Stein), x^T a ~ N(0, a^T Gamma a).
  double factor = 1.0;
  if (act.activation == Activation::relu) {
    factor = 0.5;
  } else if (act.activation == Activation::poly) {
    const int p = act.degree;
    if (p % 2 == 0) {
      factor = 0.0;
    } else {
      double aga = 0;
      for (int64_t i = 0; i < C; ++i) aga += a[static_cast<size_t>(i)] * ga[static_cast<size_t>(i)];
      double dfact = 1.0;  // (p-2)!!
      for (int k = p - 2; k > 1; k -= 2) dfact *= k;
      factor = p * dfact * std::pow(aga, (p - 1) / 2);
    }
  }
  for (double& v : ga) v *= factor;
  apply(W.V, C, ga.data(), out);
}

std::shared_ptr<const IclTestSet> icl_test_set(const IclSetup& s, int64_t n) {
  // Keyed by everything a test prompt depends on; weak: freed with the last cell using it.
  static std::mutex mu;
  static std::map<std::string, std::weak_ptr<const IclTestSet>> made;
  const std::string key = json({s.seed, s.d, s.prompt_length, s.rho, s.noise_var, n}).dump();
  std::lock_guard lock(mu);
  if (auto have = made[key].lock()) return have;
  auto set = std::make_shared<IclTestSet>();
  const int64_t d = s.d, per = (s.prompt_length + 1) * (d + 1);
  set->n = n;
  set->tokens.resize(static_cast<size_t>(n * per));
  set->target.resize(static_cast<size_t>(n));
  set->w.resize(static_cast<size_t>(n * d));
#pragma omp parallel if (n * per > 16384)
  {
    std::vector<float> scratch;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < n; ++i)
      icl_prompt_tokens(s, 1, i, set->tokens.data() + i * per, set->target.data() + i, set->w.data() + i * d, scratch);
  }
  made[key] = set;
  return set;
}

double icl_limit_sq_error(const IclSetup& s, const IclTestSet& test, const ActivationSpec& act,
                          const ReadoutWeights& W) {
  const int64_t C = s.d + 1, L = s.prompt_length, n_prompts = test.n, per = (L + 1) * C;
  if (W.C != C) throw InternalError("icl_regression: model width " + std::to_string(W.C) + " is not d + 1");
  std::vector<double> err(static_cast<size_t>(n_prompts));
  // Threads only when there is work enough to pay for waking them.
#pragma omp parallel if (n_prompts * (L + 1) > 16384)
  {
    std::vector<double> tokens(static_cast<size_t>(per)), w(static_cast<size_t>(s.d));
    std::vector<double> tl(static_cast<size_t>(C)), tinf(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < n_prompts; ++n) {
      std::copy_n(test.tokens.data() + n * per, per, tokens.data());
      std::copy_n(test.w.data() + n * s.d, s.d, w.data());
      readout_attention_output(act, W, tokens.data(), L, tl.data());
      const std::vector<double> gamma = icl_token_covariance(s, w.data());
      readout_limit_output(act, W, gamma.data(), tokens.data() + L * C, tinf.data());
      double e = 0;
      for (int64_t j = 0; j < C; ++j)
        e += (tl[static_cast<size_t>(j)] - tinf[static_cast<size_t>(j)]) *
             (tl[static_cast<size_t>(j)] - tinf[static_cast<size_t>(j)]);
      err[static_cast<size_t>(n)] = e;
    }
  }
  double sum = 0;  // in prompt order: the same value for any thread count
  for (double e : err) sum += e;
  return n_prompts > 0 ? sum / static_cast<double>(n_prompts) : std::nan("");
}

double icl_limit_sq_error(const IclSetup& s, const ActivationSpec& act, const ReadoutWeights& W, int64_t n_prompts) {
  return icl_limit_sq_error(s, *icl_test_set(s, n_prompts), act, W);
}

// L prompt tokens and the query, d + 1 wide.
static DataShape icl_data_shape(const json& config) {
  DataShape s;
  s.tokens = config.at("prompt_length").get<int64_t>() + 1;
  s.in_dim = config.at("d").get<int64_t>() + 1;
  return s;
}

// The read-out: one layer, one head of width d + 1 on the raw tokens (worker/model/model.h).
static json icl_model_config(const json& config) {
  json m = config;
  m["dim"] = config.at("d").get<int64_t>() + 1;
  m["heads"] = 1;
  m["layers"] = 1;
  return m;
}

namespace {

// The read-out's weights as JSON ({"C", "Q", "K", "V"}: row-major C x C), what save_weights
// writes and weights_from reads.
json weights_json(const ReadoutWeights& W) {
  return {{"C", W.C}, {"Q", W.Q}, {"K", W.K}, {"V", W.V}};
}

ReadoutWeights weights_of_file(const std::string& path, int64_t C) {
  std::ifstream f(path);
  if (!f)
    throw DeterministicError("weights_from: " + path + ": cannot read (a cell's readout_weights.json, " +
                             "written by a cell with save_weights: true under DIR/outputs/<id>/)");
  json j;
  try {
    j = json::parse(f);
    ReadoutWeights W;
    W.C = j.at("C").get<int64_t>();
    W.Q = j.at("Q").get<std::vector<double>>();
    W.K = j.at("K").get<std::vector<double>>();
    W.V = j.at("V").get<std::vector<double>>();
    const size_t n = static_cast<size_t>(W.C * W.C);
    if (W.C != C || W.Q.size() != n || W.K.size() != n || W.V.size() != n)
      throw InputError(
          {"weights of width " + std::to_string(W.C) + " for a read-out of width " + std::to_string(C) + " (d + 1)"});
    return W;
  } catch (const std::exception& e) {
    throw DeterministicError("weights_from: " + path + ": " + e.what());
  }
}

}  // namespace

TaskOutput run_icl_regression(const json& config, const TaskContext& ctx) {
  auto setup = std::make_shared<const IclSetup>(icl_setup_of(config));
  const ActivationSpec act = activation_spec_of(config);
  const int64_t C = setup->d + 1, L = setup->prompt_length;
  // A trained model's concentration at this L (paper B, docs/results-paperB.md): the
  // weights of another cell (save_weights), evaluated here without training.
  if (const std::string from = config.value("weights_from", std::string()); !from.empty()) {
    if (!icl_limit_defined(act))
      throw DeterministicError("weights_from: the activation has no known large-prompt limit to measure against");
    const ReadoutWeights W = weights_of_file(from, C);
    TaskOutput out;
    const double e = icl_limit_sq_error(*setup,
                                        config.at("test_prompts").get<int64_t>() > 0
                                            ? *icl_test_set(*setup, config.at("test_prompts").get<int64_t>())
                                            : *icl_test_set(*setup, 1),
                                        act, W);
    out.final_metrics["limit_sq_error"] = e;
    out.series.push_back(result_series("/icl/limit_sq_error", {1}, std::vector<double>{e}));
    return out;
  }
  if (!ctx.train) throw InternalError("task icl_regression: no trainer supplied (run it through attnsweep train)");
  const json model_config = icl_model_config(config);

  TrainingData data;
  static_cast<DataShape&>(data) = icl_data_shape(config);  // L + 1 tokens, C wide
  data.n_train = config.at("train_prompts").get<int64_t>();
  data.n_test = config.at("test_prompts").get<int64_t>();
  // The test prompts, made once for every evaluation (and every cell of this process that
  // draws the same ones); training prompts afresh each time.
  std::shared_ptr<const IclTestSet> test = icl_test_set(*setup, data.n_test);
  data.fill = [setup, test, C, L](int split, const int64_t* idx, int64_t count, float* x, int32_t*, float* y_value) {
    const int64_t per = (L + 1) * C;
    if (split == 1) {
      for (int64_t i = 0; i < count; ++i) {
        std::copy_n(test->tokens.data() + idx[i] * per, per, x + i * per);
        y_value[i] = test->target[static_cast<size_t>(idx[i])];
      }
      return;
    }
#pragma omp parallel if (count * (L + 1) > 16384)
    {
      std::vector<float> scratch;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < count; ++i)
        icl_prompt_tokens(*setup, 0, idx[i], x + i * per, y_value + i, nullptr, scratch);
    }
  };
#ifdef ATTNSWEEP_HAVE_CUDA
  auto on_device = std::make_shared<const IclPromptsCuda>(icl_prompts_cuda_args(*setup, 0));
  data.fill_device = [on_device](const int64_t* idx, int64_t count, float* x, float* y_value, void* stream) {
    icl_prompts_cuda(*on_device, idx, count, x, y_value, static_cast<cudaStream_t>(stream));
  };
#endif
  auto last = std::make_shared<ReadoutWeights>();  // the weights of the last evaluation
  if (icl_limit_defined(act)) {
    data.eval_metrics.push_back(result_eval_metric("limit_sq_error", "/icl/limit_sq_error"));
    data.measure = [setup, test, act, last](const ModelWeights& w) {
      *last = readout_weights(w);
      return std::vector<double>{icl_limit_sq_error(*setup, *test, act, *last)};
    };
  }
  TaskOutput out = ctx.train(model_config, ctx, data);
  // save_weights: the trained read-out's weights, kept beside the run (DIR/outputs/<id>/
  // under `run`, as a command cell's outputs), for weights_from cells to evaluate.
  if (config.value("save_weights", false) && last->C > 0 && out.status != CellStatus::interrupted) {
    if (ctx.checkpoint_path.empty() || ctx.cell_id.empty())
      std::fprintf(stderr, "attnsweep: save_weights: no run directory (a bare attnsweep train): weights not kept\n");
    else {
      const std::filesystem::path dir =
          std::filesystem::path(ctx.checkpoint_path).parent_path().parent_path() / "outputs" / ctx.cell_id;
      std::filesystem::create_directories(dir);
      std::ofstream f(dir / "readout_weights.json");
      f << weights_json(*last).dump() << "\n";
      if (!f.flush()) throw TransientError("save_weights: cannot write " + (dir / "readout_weights.json").string());
    }
  }
  return out;
}

namespace {

// plan's model of an icl_regression cell on one CPU slot (docs/performance.md#how-plan-
// estimates-a-grid), in parts, because a group (coordinator/fusion.h) shares only the
// prompts. Profiled (perf) at d = 5, L = 640 on the 2-core Xeon VM of 2026-12-05: drawing
// the prompts (Philox normals, the tokens, their rows) is 80 % of a cell alone, the
// read-out's products 13 %. Measured there (CPU seconds, L = 640, 128 prompts a step): a
// cell alone 2.8 s for 1500 steps, 6.2-6.4 s for 3000; a group of 16 of one data seed
// 11.2 s for 1500 steps (each cell after the first 0.56 s, 0.2 of one alone: the group
// reads out all of them in one call); two of two data seeds 13.8 s for 3000, more than
// two alone. An evaluation (test MSE and limit_sq_error, cell by cell, not fused): a
// cell's first touches its buffers afresh (page faults: half of paperB_concentration's
// CPU is system time), 28-66 ns a test token at L = 1024-4096 in a group of 16 there;
// the later ones 17 ns (that group of 16 at L = 640: 2.7 s for 15 evaluations each). The
// model, per token and step: C = d + 1 coordinates drawn at 3.2 ns each and the
// read-out's 3C x C products, (18C^2 + 12C) flops, at 250 Gflop/s (an effective rate: the
// group's fused call), 90 us a step besides, half of it the batch's own (shared: a group
// of 16 at L = 10 took 62 us a cell and step, a cell alone 127); the test prompts drawn
// once, read out at 8C ns a token the first evaluation and 3C ns each later one; 30 ms a
// cell.
struct IclCost {
  double draw_train = 0;  // the training batches' making: shared by a group's cells of one data seed
  double draw_test = 0;   // the test prompts', made once a process: likewise shared
  double own = 0;         // the read-out's steps and evaluations, the per-step and per-cell cost: each cell's
  double shared() const { return draw_train + draw_test; }
  double total() const { return shared() + own; }
};

IclCost icl_cost(const json& c) {
  const double C = c.at("d").get<double>() + 1, tokens = c.at("prompt_length").get<double>() + 1;
  const double draw_token = 3.2e-9 * C, readout_token = (18 * C * C + 12 * C) / 250e9;
  const double steps = c.at("steps").get<double>(), every = c.at("eval_every").get<double>();
  const double evals = 1 + (every > 0 ? std::floor(steps / every) : 0);
  const double trained = steps * c.at("batch").get<double>() * tokens,
               tested = c.at("test_prompts").get<double>() * tokens;
  IclCost k;
  k.draw_train = trained * draw_token + steps * 45e-6;
  k.draw_test = tested * draw_token;
  k.own = trained * readout_token + steps * 45e-6 + tested * C * (8e-9 + (evals - 1) * 3e-9) + 0.03;
  return k;
}

}  // namespace

const TaskDef& icl_regression_task() {
  static const TaskDef t = [] {
    const std::string known_limit =
        "activations with a known large-prompt limit (softmax; poly, relu with scale inv_n)";
    TaskDef d;
    d.name = "icl_regression";
    d.description = "paper B's in-context linear regression: L prompt tokens (x, y) and a query";
    // L prompt tokens + the query, C = d + 1 wide.
    d.max_prompt_length = 16384;
    d.model = TaskModel::readout;
    d.target = TaskTarget::value;
    // Paper B trains its read-out with plain SGD at a constant learning rate: no decay,
    // no clipping, no warm-up.
    d.training_defaults = {{"optimizer", "sgd"}, {"weight_decay", 0.0},       {"clip", 0.0},
                           {"warmup_steps", 0},  {"lr_schedule", "constant"}, {"eval_every", 1000}};
    d.keys = {integer_key("d", 1, kIclMaxD, 5, "dimension of x; tokens (x, y) have d + 1 coordinates"),
              number_key("rho", -0.99, 0.99, 0.5, "covariance of x: Sigma_ij = rho^|i-j|"),
              number_key("noise_var", 0.0, 1e6, 0.1, "variance of the noise eps in y = w^T x + eps"),
              integer_key("train_prompts", 1, 16777216, 1048576,
                          "training prompts (each drawn afresh from its index; an epoch is a permutation of them)"),
              integer_key("test_prompts", 1, 1048576, 1024, "fixed test prompts (test MSE and limit_sq_error)"),
              // In every cell's config, so a cell of another generator has another id: a
              // resumed run never takes a result drawn from other prompts for its own.
              string_key("prompts", {"philox"}, "philox",
                         "the prompt generator: philox = Philox4x32-10 normals in float32 (since attnsweep 0.2; "
                         "0.1 drew float64 splitmix64 Box-Muller prompts, whose cells had other ids)"),
              [] {
                ParamSpec s =
                    boolean_key("save_weights", false,
                                "keep the trained read-out's weights in DIR/outputs/<id>/readout_weights.json");
                s.omit_at_default = true;  // cells without it keep their ids
                return s;
              }(),
              [] {
                ParamSpec s = string_key("weights_from", {}, "",
                                         "a readout_weights.json (save_weights) to evaluate at this prompt length "
                                         "instead of training: limit_sq_error of that trained model; steps must be 0");
                s.omit_at_default = true;
                s.check = [](const json& v, const json& cfg) -> std::string {
                  if (v.get<std::string>().empty() || cfg.value("steps", int64_t{0}) == 0) return "";
                  return "weights_from evaluates a trained model without training: set steps to 0";
                };
                return s;
              }()};
    d.cost_s = [](const json& c) { return icl_cost(c).total(); };
    d.data_shape = icl_data_shape;
    d.model_config = icl_model_config;
    d.outputs = {
        make_final_metric("limit_sq_error",
                          "the last evaluation's /icl/limit_sq_error (steps = 0: at initialisation); NaN when the "
                          "cell diverged",
                          true, known_limit, "‖attn_L − attn_∞‖² (squared distance to the limit)"),
        make_dataset("/icl/limit_sq_error", ResultType::float64, {"evals"},
                     "mean over the test prompts of ||T_L(z) - T_inf(z)||^2: the read-out's attention output at the "
                     "query against its large-prompt limit for the prompt's Gaussian token law (Lemma 2.1)",
                     true, known_limit)};
    d.run = run_icl_regression;
    // A group is cells of one prompt length and data law that differ in their weights,
    // activation and step size; cells of one data seed share every batch. 16 (the
    // initialisations x activations of one L and seed in the paired grid): the prompts are
    // made once for 16 cells, and a group of L = 1000 still checkpoints in well under a second.
    d.fusion.may_differ = {"init_seed", "init_std", "seed", "activation", "degree", "scale", "lr"};
    d.fusion.data = {"seed"};
    d.fusion.default_size = 16;
    // A cell that shares a group's batches (coordinator/fusion.h group_cost_s) adds all but
    // the prompts it would draw alone: about 0.2 of a trained cell at L = 640, 0.7 of one
    // that only evaluates (icl_cost).
    d.fusion.added_cell_share = [](const json& c) {
      const IclCost k = icl_cost(c);
      return k.total() > 0 ? (k.total() - k.shared()) / k.total() : 1.0;
    };
    return d;
  }();
  return t;
}

}  // namespace attnsweep
