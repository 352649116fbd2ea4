#include "experiments/params.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include "experiments/listops.h"
#include "experiments/task.h"

namespace attnsweep {
namespace {

// What each implemented task is, as far as the schema needs to know. A new task (image,
// icl_regression, listops, pde) is one row here plus its own rows in the key table.
struct TaskInfo {
  const char* name;
  bool attention;             // has an attention activation (activation/degree/scale apply)
  int64_t max_prompt_length;  // 0: the task has no prompt (prompt_length does not apply)
};

constexpr TaskInfo kTasks[] = {
    // The probe materialises one N x N score matrix per sample: N = 16384 is 1 GiB in float32.
    {"norm_probe", true, 16384},
    // Fashion-MNIST as (28/p)^2 patches: N in {16, 49, 196, 784} (checked below).
    {"image", true, 784},
    // Paper B's in-context regression: L prompt tokens + the query, C = d + 1 wide.
    {"icl_regression", true, 16384},
    // Long Range Arena's ListOps, padded to the prompt length (LRA: 2000).
    {"listops", true, 16384},
    // Burgers' equation on N grid points (tokens): any N >= 4.
    {"pde", true, 8192},
    // Stand-in cells for scheduler tests: sleep, crash, hang or exit on request.
    {"synthetic", false, 0},
};

const TaskInfo* task_of(const json& cfg) {
  auto it = cfg.find("task");
  if (it == cfg.end() || !it->is_string()) return nullptr;
  const auto& name = it->get_ref<const std::string&>();
  for (const auto& t : kTasks)
    if (name == t.name) return &t;
  return nullptr;
}

bool task_is(const json& cfg, const char* name) {
  const TaskInfo* t = task_of(cfg);
  return t != nullptr && std::string(t->name) == name;
}

// The cell's activation takes a degree / a scale (the registry, kernels/activation.h).
bool activation_takes(const json& cfg, bool ActivationInfo::*what) {
  auto it = cfg.find("activation");
  if (it == cfg.end() || !it->is_string()) return false;
  const std::optional<Activation> a = activation_from_name(it->get_ref<const std::string&>());
  return a && activation_info(*a).*what;
}

// Tasks that train a model (worker/trainer.h): they share the model and optimiser keys.
bool is_training_task(const json& cfg) {
  return task_is(cfg, "image") || task_is(cfg, "icl_regression") || task_is(cfg, "listops") || task_is(cfg, "pde");
}
// Training tasks whose model is the transformer (layers, heads, dim, ... apply); the
// in-context regression read-out is one attention layer of width d + 1 (worker/model.h).
bool is_transformer_task(const json& cfg) {
  return is_training_task(cfg) && !task_is(cfg, "icl_regression");
}

// A shared training key's default for the cell's task: paper B trains its read-out with
// plain SGD at a constant learning rate, no decay, no clipping, no warm-up.
json training_default(const json& cfg, const std::string& key, const json& fallback) {
  if (task_is(cfg, "icl_regression")) {
    static const std::map<std::string, json> icl = {
        {"optimizer", "sgd"}, {"weight_decay", 0.0},       {"clip", 0.0},
        {"warmup_steps", 0},  {"lr_schedule", "constant"}, {"eval_every", 1000}};
    if (auto it = icl.find(key); it != icl.end()) return it->second;
  }
  return fallback;
}
std::function<json(const json&)> training_default_of(const char* key, json fallback) {
  return [key = std::string(key), fallback = std::move(fallback)](const json& cfg) {
    return training_default(cfg, key, fallback);
  };
}

std::function<bool(const json&)> always() {
  return [](const json&) { return true; };
}
std::function<bool(const json&)> for_task(const char* name) {
  return [name](const json& cfg) { return task_is(cfg, name); };
}
std::function<json(const json&)> fixed_default(json v) {
  return [v = std::move(v)](const json&) { return v; };
}

ParamSpec integer(std::string name, double min, double max, std::string description) {
  ParamSpec s;
  s.name = std::move(name);
  s.type = ParamType::integer;
  s.min = min;
  s.max = max;
  s.description = std::move(description);
  return s;
}
ParamSpec number(std::string name, double min, double max, std::string description) {
  ParamSpec s = integer(std::move(name), min, max, std::move(description));
  s.type = ParamType::number;
  return s;
}

constexpr double kNoBound = 1e300;

// Order matters: `applies` and `default_value` may only read keys above their own row.
std::vector<ParamSpec> make_specs() {
  std::vector<ParamSpec> v;
  {
    ParamSpec s;
    s.name = "task";
    s.type = ParamType::string;
    s.choices = task_names();
    s.description = "what the cell computes";
    s.applies = always();
    v.push_back(std::move(s));  // no default: every cell names its task
  }
  {
    ParamSpec s;
    s.name = "activation";
    s.type = ParamType::string;
    s.choices = activation_names();
    s.description = "attention activation phi";
    s.applies = [](const json& cfg) {
      const TaskInfo* t = task_of(cfg);
      return t != nullptr && t->attention;
    };
    s.default_value = fixed_default("softmax");
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("degree", kMinDegree, kMaxDegree, "power p of the polynomial activation s^p");
    s.applies = [](const json& cfg) { return activation_takes(cfg, &ActivationInfo::takes_degree); };
    s.default_value = fixed_default(1);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s;
    s.name = "scale";
    s.type = ParamType::scale;
    s.choices = scale_names();
    s.description = "factor c of the activations that take one: 1, 1/sqrt(N), 1/N or a positive number";
    s.applies = [](const json& cfg) { return activation_takes(cfg, &ActivationInfo::takes_scale); };
    s.default_value = fixed_default("none");
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("prompt_length", 1, kNoBound, "number of tokens N the attention sees");
    s.applies = [](const json& cfg) {
      const TaskInfo* t = task_of(cfg);
      return t != nullptr && t->max_prompt_length > 0;
    };
    s.check = [](const json& value, const json& cfg) -> std::string {
      const TaskInfo* t = task_of(cfg);
      if (t != nullptr && std::string(t->name) == "image") {
        if (image_patch_size(value.get<int64_t>()) != 0) return "";
        return value.dump() + " is not a patch count task image can make: 16, 49, 196 or 784 (patch 7, 4, 2, 1)";
      }
      const bool needs4 = t != nullptr && (std::string(t->name) == "listops" || std::string(t->name) == "pde");
      if (needs4 && value.get<int64_t>() < 4)
        return value.dump() + " is less than task " + t->name + " can make (" +
               (std::string(t->name) == "listops" ? "the shortest expression, [MAX d d ], is 4 tokens"
                                                  : "at least 4 grid points") +
               ")";
      if (t == nullptr || value.get<int64_t>() <= t->max_prompt_length) return "";
      return value.dump() + " is more than task " + t->name + " can make (" + (needs4 ? "4" : "1") + ".." +
             std::to_string(t->max_prompt_length) + ")";
    };
    v.push_back(std::move(s));  // no default: the prompt length is what every sweep is about
  }
  {
    ParamSpec s = integer("seed", 0, kNoBound, "seed of every random draw of the cell");
    s.applies = always();
    s.default_value = fixed_default(0);
    v.push_back(std::move(s));
  }

  // norm_probe: norms of phi(S) and its Jacobian for random Q, K at initialisation.
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"samples", 1.0, 100000.0, 32, "independent draws averaged per cell"},
        std::tuple{"head_dim", 1.0, 1024.0, 16, "query/key width d of one head"}}) {
    ParamSpec s = integer(name, lo, hi, what);
    s.applies = for_task("norm_probe");
    s.default_value = fixed_default(def);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("dim", 1, 4096, "model width D");
    s.applies = [](const json& cfg) { return task_is(cfg, "norm_probe") || is_transformer_task(cfg); };
    s.default_value = fixed_default(64);
    v.push_back(std::move(s));
  }

  // Training tasks (image): the model and the optimiser (worker/trainer.h).
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"layers", 1.0, 64.0, 4, "transformer blocks L"},
        std::tuple{"heads", 1.0, 64.0, 4, "attention heads H per block (must divide dim)"},
        std::tuple{"mlp_ratio", 1.0, 16.0, 4, "MLP hidden width = mlp_ratio x dim"},
        std::tuple{"steps", 0.0, 1e9, 3000, "optimiser steps"},
        std::tuple{"batch", 1.0, 65536.0, 128, "samples per step"},
        std::tuple{"warmup_steps", 0.0, 1e9, 100, "linear warm-up steps before the cosine decay"},
        std::tuple{"log_every", 1.0, 1e9, 50, "steps between rows of /train and /norms"},
        std::tuple{"eval_every", 0.0, 1e9, 500, "steps between test-split evaluations (0: only at the end)"},
        std::tuple{"eval_batches", 0.0, 1e9, 0, "batches of the test split per evaluation (0: all of it)"},
        std::tuple{"checkpoint_every", 0.0, 1e9, 0, "steps between checkpoints (0: only when stopped by a signal)"},
        std::tuple{"init_seed", 0.0, kNoBound, 0, "seed of the initial weights (separate from seed: paired runs)"}}) {
    ParamSpec s = integer(name, lo, hi, what);
    const std::string key = name;
    s.applies = key == "layers" || key == "heads" || key == "mlp_ratio" ? is_transformer_task : is_training_task;
    s.default_value = training_default_of(name, def);
    if (key == "heads")
      s.check = [](const json& value, const json& cfg) -> std::string {
        const int64_t h = value.get<int64_t>(), d = cfg.value("dim", int64_t{64});
        if (d % h == 0) return "";
        return "heads " + value.dump() + " does not divide dim " + std::to_string(d);
      };
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("devices", 1, 64, "devices (GPUs, or CPU devices) this cell trains on, data-parallel");
    s.applies = is_training_task;
    s.default_value = fixed_default(1);
    // Every device takes batch / devices rows of the step's batch (worker/trainer.h).
    s.check = [](const json& value, const json& cfg) -> std::string {
      const int64_t k = value.get<int64_t>(), b = cfg.value("batch", int64_t{128});
      if (b % k == 0) return "";
      return "batch " + std::to_string(b) + " is not divisible by devices " + value.dump() +
             " (each device takes batch / devices rows)";
    };
    v.push_back(std::move(s));
  }
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"lr", 0.0, 1e6, 1e-3, "peak learning rate"},
        std::tuple{"weight_decay", 0.0, 1e6, 0.05, "decoupled weight decay of the weight matrices"},
        std::tuple{"clip", 0.0, 1e12, 1.0, "gradient clipping by global norm (0: off)"},
        std::tuple{"init_std", 0.0, 1e6, 0.0,
                   "std of normal initial weight matrices (0: PyTorch nn.Linear's uniform +-1/sqrt(fan_in))"}}) {
    ParamSpec s = number(name, lo, hi, what);
    s.applies = is_training_task;
    s.default_value = training_default_of(name, def);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s;
    s.name = "optimizer";
    s.type = ParamType::string;
    s.choices = {"adamw", "sgd"};
    s.description = "AdamW (betas 0.9, 0.999, eps 1e-8) or plain SGD";
    s.applies = is_training_task;
    s.default_value = training_default_of("optimizer", "adamw");
    v.push_back(std::move(s));
  }
  {
    ParamSpec s;
    s.name = "lr_schedule";
    s.type = ParamType::string;
    s.choices = {"cosine", "constant"};
    s.description = "after the warm-up: cosine decay to 0 over the remaining steps, or a constant lr";
    s.applies = is_training_task;
    s.default_value = training_default_of("lr_schedule", "cosine");
    v.push_back(std::move(s));
  }
  {
    ParamSpec s;
    s.name = "cls";
    s.type = ParamType::boolean;
    s.description = "classify from a learned CLS token instead of the mean over tokens";
    // pde predicts every token: no pooling, no CLS.
    s.applies = [](const json& cfg) { return is_transformer_task(cfg) && !task_is(cfg, "pde"); };
    s.default_value = [](const json& cfg) { return json(task_is(cfg, "listops")); };
    v.push_back(std::move(s));
  }

  // Data of the generated tasks (listops, pde): sizes and the seed of the data alone, so
  // that cells with different `seed` or `init_seed` share one test set.
  auto generated = [](const json& cfg) { return task_is(cfg, "listops") || task_is(cfg, "pde"); };
  {
    ParamSpec s = integer("data_seed", 0, kNoBound, "seed of the generated train and test samples");
    s.applies = generated;
    s.default_value = fixed_default(0);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("n_train", 1, 1e9, "training samples (listops: LRA's 96000; pde: 1000)");
    s.applies = generated;
    s.default_value = [](const json& cfg) { return json(task_is(cfg, "listops") ? 96000 : 1000); };
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("n_test", 1, 1e9, "test samples, fixed per data_seed (listops: LRA's 2000; pde: 200)");
    s.applies = generated;
    s.default_value = [](const json& cfg) { return json(task_is(cfg, "listops") ? 2000 : 200); };
    v.push_back(std::move(s));
  }

  // listops: the expression generator (experiments/listops.h); LRA's defaults.
  {
    ParamSpec s = integer("depth", 1, 64, "most nested operators of a ListOps expression");
    s.applies = for_task("listops");
    s.default_value = fixed_default(10);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("arity", 2, 64, "most arguments of a ListOps operator");
    s.applies = for_task("listops");
    s.default_value = fixed_default(10);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("min_length", 1, kNoBound,
                          "shortest expression in tokens (default prompt_length / 4, as LRA's 500 of 2000)");
    s.applies = for_task("listops");
    s.default_value = [](const json& cfg) {
      return json(std::max<int64_t>(1, cfg.value("prompt_length", int64_t{4}) / 4));
    };
    s.check = [](const json& value, const json& cfg) -> std::string {
      const int64_t m = value.get<int64_t>(), n = cfg.value("prompt_length", int64_t{0});
      const int64_t depth = cfg.value("depth", int64_t{10}), arity = cfg.value("arity", int64_t{10});
      if (m > n) return value.dump() + " is more than prompt_length " + std::to_string(n);
      if (const int64_t longest = listops_longest(depth, arity); m > longest)
        return value.dump() + " is longer than any expression of depth " + std::to_string(depth) + " and arity " +
               std::to_string(arity) + " (at most " + std::to_string(longest) + " tokens)";
      return "";
    };
    v.push_back(std::move(s));
  }

  // pde: Burgers' equation (experiments/pde.h).
  {
    ParamSpec s = number("nu", 0.01, 100, "viscosity of Burgers' equation u_t + u u_x = nu u_xx");
    s.applies = for_task("pde");
    s.default_value = fixed_default(0.1);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = number("final_time", 1e-6, 100, "T of the operator u(., 0) -> u(., T)");
    s.applies = for_task("pde");
    s.default_value = fixed_default(1.0);
    v.push_back(std::move(s));
  }

  // icl_regression (experiments/icl_regression.h): the prompt distribution of paper B.
  {
    ParamSpec s = integer("d", 1, 64, "dimension of x; tokens (x, y) have d + 1 coordinates");
    s.applies = for_task("icl_regression");
    s.default_value = fixed_default(5);
    v.push_back(std::move(s));
  }
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"rho", -0.99, 0.99, 0.5, "covariance of x: Sigma_ij = rho^|i-j|"},
        std::tuple{"noise_var", 0.0, 1e6, 0.1, "variance of the noise eps in y = w^T x + eps"}}) {
    ParamSpec s = number(name, lo, hi, what);
    s.applies = for_task("icl_regression");
    s.default_value = fixed_default(def);
    v.push_back(std::move(s));
  }
  for (auto [name, lo, hi, def, what] :
       {std::tuple{"train_prompts", 1.0, 16777216.0, 1048576,
                   "training prompts (each drawn afresh from its index; an epoch is a permutation of them)"},
        std::tuple{"test_prompts", 1.0, 1048576.0, 1024, "fixed test prompts (test MSE and limit_sq_error)"}}) {
    ParamSpec s = integer(name, lo, hi, what);
    s.applies = for_task("icl_regression");
    s.default_value = fixed_default(def);
    v.push_back(std::move(s));
  }

  // synthetic: lets scheduler tests ask for slow, crashing, hanging or failing cells.
  {
    ParamSpec s = number("seconds", 0, 86400, "how long the cell sleeps before writing its result");
    s.applies = for_task("synthetic");
    s.default_value = fixed_default(0.0);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("crash_attempts", 0, kNoBound, "the cell segfaults on its first this many attempts");
    s.applies = for_task("synthetic");
    s.default_value = fixed_default(0);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s;
    s.name = "hang";
    s.type = ParamType::boolean;
    s.description = "the cell never finishes (timeout tests)";
    s.applies = for_task("synthetic");
    s.default_value = fixed_default(false);
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer("exit_code", 0, 255, "exit with this code instead of writing a result (0: write it)");
    s.applies = for_task("synthetic");
    s.default_value = fixed_default(0);
    v.push_back(std::move(s));
  }
  return v;
}

// Bounds print as integers where they are (1..16, not 1.0..16.0).
std::string format_bound(double x) {
  if (std::floor(x) == x && std::fabs(x) < 1e15) return std::to_string(static_cast<int64_t>(x));
  return json(x).dump();
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

// Levenshtein distance, with a swap of two neighbouring letters counting as one edit
// (optimal string alignment): "scael" is one slip from "scale", not two.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string unknown_choice(const std::string& got, const std::string& expected,
                           const std::vector<std::string>& choices) {
  std::string msg = "unknown value " + json(got).dump();
  if (auto m = closest_match(got, choices); !m.empty()) msg += " (did you mean " + json(m).dump() + "?)";
  return msg + "; expected " + expected;
}

// Integers beyond 2^53 would not survive a trip through a double (Python, JavaScript).
constexpr double kMaxExactInteger = 9007199254740992.0;

}  // namespace

const std::vector<ParamSpec>& param_specs() {
  static const std::vector<ParamSpec> specs = make_specs();
  return specs;
}

const ParamSpec* find_param(const std::string& name) {
  for (const auto& s : param_specs())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const auto& t : kTasks) names.emplace_back(t.name);
  return names;
}

std::string describe_expected(const ParamSpec& spec) {
  auto bounds = [&](const char* what) {
    const bool lo = spec.min > -kNoBound, hi = spec.max < kNoBound;
    std::string s = what;
    if (lo && hi) return s + " in " + format_bound(spec.min) + ".." + format_bound(spec.max);
    if (lo) return s + " >= " + format_bound(spec.min);
    if (hi) return s + " <= " + format_bound(spec.max);
    return s;
  };
  switch (spec.type) {
    case ParamType::integer: return bounds("an integer");
    case ParamType::number: return bounds("a number");
    case ParamType::boolean: return "true or false";
    case ParamType::string: return spec.choices.empty() ? "a string" : "one of " + join(spec.choices, ", ");
    case ParamType::scale: return "one of " + join(spec.choices, ", ") + ", or a positive number";
  }
  return "a value";
}

std::string describe_value(const json& value) {
  if (value.is_array()) return "a list";
  if (value.is_object()) return "an object";
  std::string s = value.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

json canonical_value(const ParamSpec& spec, const json& value, std::string* problem) {
  auto fail = [&](std::string msg) {
    if (problem) *problem = std::move(msg);
    return json();
  };
  auto expected_got = [&] { return fail("expected " + describe_expected(spec) + ", got " + describe_value(value)); };
  switch (spec.type) {
    case ParamType::integer: {
      if (!value.is_number()) return expected_got();
      const double d = value.get<double>();
      if (!std::isfinite(d) || std::floor(d) != d || d < spec.min || d > spec.max || std::fabs(d) > kMaxExactInteger)
        return expected_got();
      return value.is_number_float()      ? json(static_cast<int64_t>(d))
             : value.is_number_unsigned() ? json(static_cast<int64_t>(value.get<uint64_t>()))
                                          : json(value.get<int64_t>());
    }
    case ParamType::number: {
      if (!value.is_number()) return expected_got();
      const double d = value.get<double>();
      if (!std::isfinite(d) || d < spec.min || d > spec.max) return expected_got();
      return json(d);
    }
    case ParamType::boolean:
      if (!value.is_boolean()) return expected_got();
      return value;
    case ParamType::string: {
      if (!value.is_string()) return expected_got();
      const auto& s = value.get_ref<const std::string&>();
      if (spec.choices.empty() || std::find(spec.choices.begin(), spec.choices.end(), s) != spec.choices.end())
        return value;
      return fail(unknown_choice(s, describe_expected(spec), spec.choices));
    }
    case ParamType::scale: {
      if (value.is_string()) {
        const auto& s = value.get_ref<const std::string&>();
        if (std::find(spec.choices.begin(), spec.choices.end(), s) != spec.choices.end()) return value;
        return fail(unknown_choice(s, describe_expected(spec), spec.choices));
      }
      if (value.is_number()) {
        const double d = value.get<double>();
        if (std::isfinite(d) && d > 0) return json(d);
        return fail("expected a positive number or one of " + join(spec.choices, ", ") + ", got " +
                    describe_value(value));
      }
      return expected_got();
    }
  }
  return expected_got();
}

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = std::max<size_t>(1, word.size() / 3);
  std::string best;
  size_t best_d = limit + 1;
  for (const auto& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  return best;
}

double estimate_cost_s(const json& cfg) {
  if (task_is(cfg, "norm_probe")) {
    const double n = cfg.value("prompt_length", 1.0);
    const double samples = cfg.value("samples", 32.0), head_dim = cfg.value("head_dim", 16.0);
    // Scores, phi, phi' and both norms: about (2d + 20) flops per score entry.
    return samples * n * n * (2 * head_dim + 20) / 2e9 + 0.01;
  }
  if (task_is(cfg, "synthetic")) return cfg.value("seconds", 0.0) + 0.005;
  if (task_is(cfg, "icl_regression")) {
    // Per token: the read-out's 3C x C products forward and backward, the attention and
    // the prompt's draws, at the ~3 GFLOP/s these small products and draws sustain
    // (measured: 0.26 us per token and step at d = 5, L = 40, batch 128);
    // each evaluation draws and runs the test prompts twice (test MSE, limit_sq_error).
    const double c = cfg.value("d", 5.0) + 1, tokens = cfg.value("prompt_length", 10.0) + 1;
    const double per_token = 18 * c * c + 12 * c + 100;
    const double steps = cfg.value("steps", 3000.0), every = cfg.value("eval_every", 1000.0);
    const double evals = 1 + (every > 0 ? std::floor(steps / every) : 0);
    return (steps * cfg.value("batch", 128.0) + evals * cfg.value("test_prompts", 1024.0) * 2) * tokens * per_token /
               3e9 +
           0.2;
  }
  if (is_training_task(cfg)) {
    // 6 flops per weight per token (forward + backward) plus the N^2 attention products,
    // at the ~30 GFLOP/s one CPU slot sustains.
    const double n = cfg.value("prompt_length", 49.0), d = cfg.value("dim", 64.0);
    const double per_token = cfg.value("layers", 4.0) * (2 * (4 + 2 * cfg.value("mlp_ratio", 4.0)) * d * d + 4 * n * d);
    double data = 0;  // pde: each sample's Burgers solve, ~15 ms at nu = 0.1, T = 1
    if (task_is(cfg, "pde"))
      data = 0.015 * (cfg.value("n_train", 1000.0) + cfg.value("n_test", 200.0)) * cfg.value("final_time", 1.0) *
             std::sqrt(0.1 / cfg.value("nu", 0.1));
    return 3 * cfg.value("steps", 3000.0) * cfg.value("batch", 128.0) * n * per_token / 30e9 + 0.5 + data;
  }
  return 1.0;
}

json activation_registry_json() {
  json acts = json::array(), scales = json::array(), specs = json::array();
  for (const ActivationInfo& a : kActivations)
    acts.push_back({{"name", a.name},
                    {"label", a.label},
                    {"formula", a.formula},
                    {"elementwise", a.elementwise},
                    {"takes_degree", a.takes_degree},
                    {"takes_scale", a.takes_scale},
                    {"bias_log_n", a.bias_log_n},
                    {"torch", a.torch}});
  for (const ScaleInfo& s : kScales) scales.push_back({{"name", s.name}, {"label", s.label}});
  for (const ActivationSpec& t : registry_test_specs()) {
    json scale = t.scale == ScaleKind::value ? json(t.scale_value) : json(kScales[static_cast<size_t>(t.scale)].name);
    specs.push_back({{"activation", activation_name(t.activation)}, {"degree", t.degree}, {"scale", scale}});
  }
  return {{"activations", acts}, {"scales", scales}, {"degree", {kMinDegree, kMaxDegree}}, {"test_specs", specs}};
}

}  // namespace attnsweep
