#include "experiments/command_metrics.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>

#include "experiments/param_spec.h"
#include "experiments/result_schema.h"

namespace attnsweep {

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

namespace {

double metric_value(const json& v, const std::string& where, const std::string& name) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number() || v.is_boolean())
    throw DeterministicError(where + ": \"" + name + "\": expected a number or null, got " + describe_value(v));
  return v.get<double>();
}

// A metric name: letters, digits and _, in parts joined by / (W&B's train/loss); each
// part a name, so that /train/<name> is a dataset path of the result file.
void check_name(const std::string& name, const std::string& where) {
  size_t start = 0;
  for (;;) {
    const size_t slash = name.find('/', start);
    if (!is_identifier(name.substr(start, slash == std::string::npos ? std::string::npos : slash - start)))
      throw DeterministicError(where + ": " + json(name).dump() +
                               ": expected a metric name of letters, digits and _, in parts joined by / (train/loss)");
    if (slash == std::string::npos) return;
    start = slash + 1;
  }
}

// Python's json.dumps writes NaN, Infinity and -Infinity for the non-finite floats: JSON
// has no such tokens, so they are read as null (a missing value), the rest as JSON.
json parse_metrics_json(const std::string& line) {
  json rec = json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!rec.is_discarded()) return rec;
  std::string fixed;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '"' && (i == 0 || line[i - 1] != '\\')) quoted = !quoted;
    if (!quoted) {
      bool replaced = false;
      for (const char* tok : {"-Infinity", "Infinity", "NaN"})
        if (line.compare(i, std::strlen(tok), tok) == 0) {
          fixed += "null";
          i += std::strlen(tok) - 1;
          replaced = true;
          break;
        }
      if (replaced) continue;
    }
    fixed += c;
  }
  return json::parse(fixed);  // throws: not JSON even so
}

}  // namespace

Metrics read_metrics(const std::string& path) {
  Metrics m;
  std::ifstream f(path);
  std::string line;
  for (int64_t lineno = 1; std::getline(f, line); ++lineno)
    read_metrics_line(line, path + ":" + std::to_string(lineno), m);
  return m;
}

void read_metrics_line(const std::string& line, const std::string& where, Metrics& m) {
  {
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    json rec;
    try {
      rec = parse_metrics_json(line);
    } catch (const std::exception&) {
      throw DeterministicError(where + ": not a JSON line: " + describe_value(json(line)) +
                               "; expected {\"step\": N, \"loss\": ...} or {\"final\": {...}}");
    }
    if (!rec.is_object()) throw DeterministicError(where + ": expected a JSON object, got " + describe_value(rec));
    if (rec.contains("final")) {
      if (!rec["final"].is_object() || rec.size() != 1)
        throw DeterministicError(where + ": expected the final record {\"final\": {\"name\": number, ...}}, got " +
                                 describe_value(json(line)));
      std::map<std::string, double> fin;
      for (auto it = rec["final"].begin(); it != rec["final"].end(); ++it) {
        check_name(it.key(), where);
        fin[it.key()] = metric_value(it.value(), where, it.key());
      }
      m.final = std::move(fin);
      return;
    }
    if (!rec.contains("step") || !rec["step"].is_number_integer() || rec["step"].get<int64_t>() < 0)
      throw DeterministicError(where + ": \"step\": expected an integer >= 0, got " +
                               (rec.contains("step") ? describe_value(rec["step"]) : std::string("none")));
    std::map<std::string, double> values;
    for (auto it = rec.begin(); it != rec.end(); ++it) {
      if (it.key() == "step") continue;
      check_name(it.key(), where);
      values[it.key()] = metric_value(it.value(), where, it.key());
    }
    m.steps[rec["step"].get<int64_t>()] = std::move(values);
  }
}

TaskOutput output_of(const Metrics& m) {
  TaskOutput out;
  out.final_metrics = *m.final;
  std::set<std::string> names;
  for (const auto& [step, values] : m.steps)
    for (const auto& kv : values) names.insert(kv.first);
  const uint64_t T = m.steps.size();
  std::vector<int64_t> steps;
  for (const auto& kv : m.steps) steps.push_back(kv.first);
  out.series.push_back({"/train/step", {T}, steps, "the steps the program logged"});
  for (const std::string& name : names) {
    std::vector<float> v;
    for (const auto& [step, values] : m.steps) {
      auto it = values.find(name);
      v.push_back(it == values.end() ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(it->second));
    }
    out.series.push_back({"/train/" + name,
                          {T},
                          std::move(v),
                          "the program's " + name + " at each /train/step (NaN: not logged at that step)"});
  }
  return out;
}

}  // namespace attnsweep
