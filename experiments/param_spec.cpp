#include "experiments/param_spec.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "base/errors.h"

namespace attnsweep {
namespace {

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

ParamSpec make_key(std::string name, ParamType type, json default_value, std::string description) {
  ParamSpec s;
  s.name = std::move(name);
  s.type = type;
  s.description = std::move(description);
  if (!default_value.is_null()) s.default_value = [v = std::move(default_value)](const json&) { return v; };
  return s;
}

namespace {
thread_local const std::vector<ParamSpec>* g_declared = nullptr;
}

DeclaredKeysScope::DeclaredKeysScope(std::vector<ParamSpec> keys) : keys_(std::move(keys)), outer_(g_declared) {
  g_declared = &keys_;
}

DeclaredKeysScope::~DeclaredKeysScope() {
  g_declared = outer_;
}

const std::vector<ParamSpec>& declared_keys() {
  static const std::vector<ParamSpec> none;
  return g_declared ? *g_declared : none;
}

ParamSpec integer_key(std::string name, double min, double max, json default_value, std::string description) {
  ParamSpec s = make_key(std::move(name), ParamType::integer, std::move(default_value), std::move(description));
  s.min = min;
  s.max = max;
  return s;
}
ParamSpec seed_following_key(std::string name, std::string description) {
  ParamSpec s = integer_key(std::move(name), 0, kNoBound, 0, std::move(description) + " (default: the cell's seed)");
  s.default_value = [](const json& cfg) { return cfg.contains("seed") ? cfg.at("seed") : json(0); };
  return s;
}
ParamSpec number_key(std::string name, double min, double max, json default_value, std::string description) {
  ParamSpec s = integer_key(std::move(name), min, max, std::move(default_value), std::move(description));
  s.type = ParamType::number;
  return s;
}
ParamSpec string_key(std::string name, std::vector<std::string> choices, json default_value, std::string description) {
  ParamSpec s = make_key(std::move(name), ParamType::string, std::move(default_value), std::move(description));
  s.choices = std::move(choices);
  return s;
}
ParamSpec boolean_key(std::string name, json default_value, std::string description) {
  return make_key(std::move(name), ParamType::boolean, std::move(default_value), std::move(description));
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
  return {{"activations", acts},
          {"scales", scales},
          {"degree", {kMinDegree, kMaxDegree}},
          {"fixed_degrees", kFixedDegrees},
          {"test_specs", specs}};
}

ActivationSpec activation_spec_of(const json& config) {
  // Through the one parser of a spec (kernels/activation.h), which the attention command
  // and the PyTorch op use too: a numeric scale as its shortest exact decimal.
  std::string scale = "none";
  if (auto it = config.find("scale"); it != config.end()) {
    if (it->is_number()) {
      char buf[32];
      const auto end = std::to_chars(buf, buf + sizeof buf, it->get<double>()).ptr;
      scale.assign(buf, end);
    } else {
      scale = it->get<std::string>();
    }
  }
  ActivationSpec spec;
  const std::string problem =
      parse_activation_spec(config.at("activation").get<std::string>(), config.value("degree", 1), scale, &spec);
  if (!problem.empty()) throw InputError({problem});
  return spec;
}

}  // namespace attnsweep
