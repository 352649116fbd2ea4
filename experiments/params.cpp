#include "experiments/params.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>

#include <stdexcept>

#include "experiments/param_spec.h"
#include "experiments/registry.h"
#include "experiments/training_keys.h"

namespace attnsweep {
namespace {

// The cell's activation takes a degree / a scale (the registry, kernels/activation.h).
bool activation_takes(const json& cfg, bool ActivationInfo::*what) {
  auto it = cfg.find("activation");
  if (it == cfg.end() || !it->is_string()) return false;
  const std::optional<ActivationNames> a = look_up_activation(it->get_ref<const std::string&>());
  return a && activation_info(a->activation).*what;
}

// The prompt length against what the cell's task can make (registry.h).
std::string check_prompt_length(const json& value, const json& cfg) {
  const TaskDef* t = task_of(cfg);
  if (t == nullptr) return "";
  const int64_t n = value.get<int64_t>();
  if (t->check_prompt_length != nullptr) return t->check_prompt_length(n);
  if (n < t->min_prompt_length)
    return value.dump() + " is less than task " + t->name + " can make (" + t->min_prompt_why + ")";
  if (n <= t->max_prompt_length) return "";
  return value.dump() + " is more than task " + t->name + " can make (" + std::to_string(t->min_prompt_length) + ".." +
         std::to_string(t->max_prompt_length) + ")";
}

// The keys every cell has, whatever its task. Order matters: `applies` and
// `default_value` may only read keys above their own row.
std::vector<ParamSpec> make_shared_specs() {
  std::vector<ParamSpec> v;
  {
    ParamSpec s = string_key("task", task_names(), json(), "what the cell computes");
    s.applies = [](const json&) { return true; };
    v.push_back(std::move(s));  // no default: every cell names its task
  }
  {
    ParamSpec s = string_key("activation", activation_names(), "softmax", "attention activation phi");
    s.applies = [](const json& cfg) {
      const TaskDef* t = task_of(cfg);
      return t != nullptr && t->attention;
    };
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer_key("degree", kMinDegree, kMaxDegree, 1, "power p of the polynomial activation s^p");
    s.applies = [](const json& cfg) { return activation_takes(cfg, &ActivationInfo::takes_degree); };
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = make_key("scale", ParamType::scale, "none",
                           "factor c of the activations that take one: 1, 1/sqrt(N), 1/N or a positive number");
    s.choices = scale_names();
    s.applies = [](const json& cfg) { return activation_takes(cfg, &ActivationInfo::takes_scale); };
    v.push_back(std::move(s));
  }
  {
    ParamSpec s = integer_key("prompt_length", 1, kNoBound, json(), "number of tokens N the attention sees");
    s.applies = [](const json& cfg) {
      const TaskDef* t = task_of(cfg);
      return t != nullptr && t->max_prompt_length > 0;
    };
    s.check = check_prompt_length;
    v.push_back(std::move(s));  // no default: the prompt length is what every sweep is about
  }
  {
    ParamSpec s = integer_key("seed", 0, kNoBound, 0, "seed of every random draw of the cell");
    s.applies = [](const json&) { return true; };
    v.push_back(std::move(s));
  }
  return v;
}

const std::vector<ParamSpec>& shared_specs() {
  static const std::vector<ParamSpec> specs = make_shared_specs();
  return specs;
}

bool same_domain(const ParamSpec& a, const ParamSpec& b) {
  return a.type == b.type && a.min == b.min && a.max == b.max && a.choices == b.choices;
}

std::vector<ParamSpec> make_all_specs() {
  std::vector<ParamSpec> all;
  auto add = [&](const ParamSpec& s, const std::string& where) {
    for (const ParamSpec& seen : all)
      if (seen.name == s.name) {
        if (!same_domain(seen, s))
          throw std::logic_error("key " + s.name + " of " + where +
                                 " is declared with another type or range than before (experiments/registry.h)");
        return;
      }
    all.push_back(s);
  };
  for (const ParamSpec& s : shared_specs()) add(s, "the shared keys");
  for (const ParamSpec& s : model_param_specs()) add(s, "the model keys");
  for (const ParamSpec& s : training_param_specs()) add(s, "the training keys");
  for (const TaskDef* t : task_registry())
    for (const ParamSpec& s : t->keys) add(s, "task " + t->name);
  return all;
}

}  // namespace

std::vector<const ParamSpec*> cell_param_specs(const TaskDef* task) {
  std::vector<const ParamSpec*> out;
  for (const ParamSpec& s : shared_specs()) out.push_back(&s);
  if (task == nullptr) return out;
  if (task->model == TaskModel::transformer)
    for (const ParamSpec& s : model_param_specs()) out.push_back(&s);
  if (task->trains())
    for (const ParamSpec& s : training_param_specs()) out.push_back(&s);
  for (const ParamSpec& s : task->keys) out.push_back(&s);
  if (task->declared_keys)
    for (const ParamSpec& s : declared_keys()) out.push_back(&s);
  return out;
}

const std::vector<ParamSpec>& param_specs() {
  static const std::vector<ParamSpec> specs = make_all_specs();
  return specs;
}

const ParamSpec* find_param(const std::string& name) {
  for (const auto& s : declared_keys())
    if (s.name == name) return &s;
  for (const auto& s : param_specs())
    if (s.name == name) return &s;
  return nullptr;
}

std::vector<std::string> task_names() {
  std::vector<std::string> names;
  for (const TaskDef* t : task_registry()) names.push_back(t->name);
  return names;
}

double estimate_cost_s(const json& cfg) {
  const TaskDef* t = task_of(cfg);
  return t != nullptr && t->cost_s != nullptr ? t->cost_s(cfg) : 1.0;
}

}  // namespace attnsweep
