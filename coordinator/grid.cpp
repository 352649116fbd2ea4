// The grid format's reader (docs/grid-format.md): every key validated against the task
// registry (experiments/registry.h), the axes expanded, excludes applied, each cell
// resolved to its effective config and content id. The JSON text itself (positions,
// duplicate keys) is coordinator/json_text.cpp's; the JSON Schema is generated in
// coordinator/grid_schema.cpp. `plan`, `run`, `train`, `submit` and the fuzzer all read
// grids here.
// About 900 lines: one reader, because its passes (keys, axes, excludes, overrides,
// resources, each cell's effective config) report into one list of problems with the
// file's positions, and splitting it would pass that state between files.
#include "coordinator/grid.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <unordered_set>

#include "base/sha256.h"
#include "base/text_file.h"
#include "coordinator/json_text.h"
#include "experiments/command.h"
#include "experiments/params.h"
#include "experiments/registry.h"
#include "experiments/result_schema.h"
#include "kernels/activation.h"
#include "results/table.h"
#include "results/trajectory_metric.h"

namespace attnsweep {

using ordered_json = nlohmann::ordered_json;

namespace {

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) out += (i ? "\n" : "") + lines[i];
  return out;
}

// Every problem of one input file, in the order found, each reported once (a bad value
// on an axis would otherwise be reported once per cell it reaches).
class Problems {
 public:
  explicit Problems(std::string file) : file_(std::move(file)) {}
  void add(const std::string& path, const std::string& msg) {
    add_line(path.empty() ? file_ + ": " + msg : file_ + ": " + path + ": " + msg);
  }
  void add_line(std::string line) {
    if (seen_.insert(line).second) lines_.push_back(std::move(line));
  }
  bool empty() const { return lines_.empty(); }
  const std::string& file() const { return file_; }
  void throw_if_any() {
    if (!lines_.empty()) throw InputError(std::move(lines_));
  }

 private:
  std::string file_;
  std::vector<std::string> lines_;
  std::set<std::string> seen_;
};

// The grid is parsed order-preserving (axis order is expansion order); configs are plain json.
json to_plain(const ordered_json& v) {
  using t = ordered_json::value_t;
  switch (v.type()) {
    case t::object: {
      json o = json::object();
      for (auto it = v.begin(); it != v.end(); ++it) o[it.key()] = to_plain(it.value());
      return o;
    }
    case t::array: {
      json a = json::array();
      for (const auto& x : v) a.push_back(to_plain(x));
      return a;
    }
    case t::string: return v.get<std::string>();
    case t::boolean: return v.get<bool>();
    case t::number_integer: return v.get<int64_t>();
    case t::number_unsigned: return v.get<uint64_t>();
    case t::number_float: return v.get<double>();
    default: return nullptr;
  }
}

json to_plain(const json& v) {
  return v;
}

std::vector<std::string> param_names() {
  std::vector<std::string> names;
  for (const auto& s : declared_keys()) names.push_back(s.name);
  for (const auto& s : param_specs()) names.push_back(s.name);
  return names;
}

std::string unknown_key(const std::string& key, const std::vector<std::string>& known) {
  std::string msg = "unknown key";
  if (auto m = closest_match(key, known); !m.empty()) msg += " (did you mean " + json(m).dump() + "?)";
  return msg;
}

// A validated value and where it came from, so a later problem (a cross-field check)
// can point at the axis element, fixed entry or include entry that set it.
struct Sourced {
  json value;
  std::string path;
};
using Values = std::map<std::string, Sourced>;

// Validates one `key: value` of a config (axes element, fixed, include, cell file):
// the key must be a parameter and the value a valid scalar for it.
std::optional<json> check_value(const std::string& key, const json& value, const std::string& path,
                                Problems& problems) {
  const ParamSpec* spec = find_param(key);
  if (spec == nullptr) return std::nullopt;  // reported by the caller, once per key
  std::string problem;
  json v = canonical_value(*spec, value, &problem);
  if (v.is_null()) {
    problems.add(path, problem);
    return std::nullopt;
  }
  return v;
}

// A flat object of key: scalar (fixed, an include entry, a cell file). Returns false if
// a value was bad: a cell built without it would report it again as missing.
// Walks the order-preserving source where there is one, so problems read top to bottom.
template <class J>
bool read_flat(const J& obj, const std::string& prefix, Problems& problems, Values& out) {
  bool ok = true;
  const auto known = param_names();
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    const json value = to_plain(it.value());
    const std::string path = dotted(prefix, key);
    if (find_param(key) == nullptr) {
      problems.add(path, unknown_key(key, known));  // reported; the rest of the entry is still checked
      continue;
    }
    if (value.is_array()) {
      problems.add(path, prefix == "fixed" ? "expected a single value, got a list (to sweep it, move it to axes)"
                                           : "expected a single value, got a list");
      ok = false;
      continue;
    }
    if (auto v = check_value(key, value, path, problems))
      out[key] = {std::move(*v), path};
    else
      ok = false;
  }
  return ok;
}

std::string missing_message(const ParamSpec& spec, const json& cfg) {
  if (spec.name == "task") return "missing; expected " + describe_expected(spec);
  std::string who = cfg.contains("task") ? "task " + cfg["task"].get<std::string>() + " needs it" : "required";
  return "missing; " + who + ": " + describe_expected(spec);
}

// The effective config of one cell: defaults, overridden by `values` (fixed already
// merged under the cell's own values), keys that do not apply dropped.
std::optional<json> resolve(const Values& values, const std::string& missing_prefix, Problems& problems) {
  json cfg = json::object();
  bool ok = true;
  // The shared keys lead every task's list: once `task` is resolved, its keys follow.
  std::vector<const ParamSpec*> specs = cell_param_specs(nullptr);
  for (size_t i = 0; i < specs.size(); ++i) {
    const ParamSpec& spec = *specs[i];
    if (spec.applies && !spec.applies(cfg)) continue;
    if (auto it = values.find(spec.name); it != values.end()) {
      if (spec.omit_at_default && spec.default_value && it->second.value == spec.default_value(cfg)) continue;
      cfg[spec.name] = it->second.value;
    } else if (json d = spec.default_value ? spec.default_value(cfg) : json(); !d.is_null()) {
      if (spec.omit_at_default) continue;
      cfg[spec.name] = std::move(d);
    } else {
      problems.add(dotted(missing_prefix, spec.name), missing_message(spec, cfg));
      ok = false;
    }
    if (spec.name == "task") specs = cell_param_specs(task_of(cfg));
  }
  for (const ParamSpec* s : specs) {
    const ParamSpec& spec = *s;
    if (!spec.check || !cfg.contains(spec.name)) continue;
    if (std::string msg = spec.check(cfg[spec.name], cfg); !msg.empty()) {
      auto it = values.find(spec.name);
      problems.add(it != values.end() ? it->second.path : dotted(missing_prefix, spec.name), msg);
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return cfg;
}

Resources read_resources(const ordered_json& obj, Problems& problems) {
  Resources r;
  std::vector<std::string> known;
  for (const auto& s : resource_specs()) known.push_back(s.name);
  if (!obj.is_object()) {
    std::string names;
    for (const std::string& k : known) names += (names.empty() ? "" : ", ") + k;
    problems.add("resources", "expected an object with " + names + ", got " + describe_value(to_plain(obj)));
    return r;
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    const json value = to_plain(it.value());
    const std::string path = "resources." + key;
    auto spec = std::find_if(resource_specs().begin(), resource_specs().end(),
                             [&](const ParamSpec& s) { return s.name == key; });
    if (spec == resource_specs().end()) {
      problems.add(path, unknown_key(key, known));
      continue;
    }
    std::string problem;
    json v = canonical_value(*spec, value, &problem);
    if (v.is_null()) {
      problems.add(path, problem);
      continue;
    }
    if (key == "gpus_per_cell") r.gpus_per_cell = v.get<int>();
    if (key == "timeout_s") r.timeout_s = v.get<double>();
    if (key == "retries") r.retries = v.get<int>();
    if (key == "rank_timeout_s") r.rank_timeout_s = v.get<double>();
    if (key == "cells_per_gpu") r.cells_per_gpu = v.get<int>();
    if (key == "gpu_memory_gib") r.gpu_memory_gib = v.get<double>();
    if (key == "fuse") r.fuse = v.get<int>();
    if (key == "cost_s") r.cost_s = v.get<double>();
  }
  return r;
}

struct Axis {
  std::string key;
  std::vector<Sourced> values;
};

// Beyond this the product is a typo (an axis of 10^6 seeds), not an experiment.
constexpr uint64_t kMaxProduct = 1'000'000;

std::vector<Axis> read_axes(const ordered_json& axes, Problems& problems, bool& ok) {
  std::vector<Axis> out;
  if (!axes.is_object()) {
    problems.add("axes", "expected an object of key: [values], got " + describe_value(to_plain(axes)));
    ok = false;
    return out;
  }
  const auto known = param_names();
  for (auto it = axes.begin(); it != axes.end(); ++it) {
    const std::string path = "axes." + it.key();
    if (find_param(it.key()) == nullptr) {
      problems.add(path, unknown_key(it.key(), known));
      continue;
    }
    if (!it.value().is_array()) {
      problems.add(path, "expected a list of values, got " + describe_value(to_plain(it.value())) +
                             " (a single value belongs in fixed)");
      ok = false;
      continue;
    }
    if (it.value().empty()) {
      problems.add(path, "empty list: the grid would have no cells");
      ok = false;
      continue;
    }
    // A bad element is reported and left out; the other elements still make cells, so
    // their own problems (a prompt length the task cannot make) are reported too.
    Axis axis{it.key(), {}};
    for (size_t i = 0; i < it.value().size(); ++i) {
      const std::string ipath = indexed(path, i);
      json v = to_plain(it.value()[i]);
      if (v.is_array() || v.is_object()) {
        problems.add(ipath, "expected a single value, got " + describe_value(v));
        continue;
      }
      if (auto c = check_value(it.key(), v, ipath, problems)) axis.values.push_back({std::move(*c), ipath});
    }
    out.push_back(std::move(axis));
  }
  return out;
}

// exclude[i]: key -> allowed values (a list in the grid matches any of its items).
using ExcludeEntry = std::map<std::string, std::vector<json>>;

std::vector<ExcludeEntry> read_excludes(const ordered_json& list, Problems& problems) {
  std::vector<ExcludeEntry> out;
  if (!list.is_array()) {
    problems.add("exclude", "expected a list of objects, got " + describe_value(to_plain(list)));
    return out;
  }
  const auto known = param_names();
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string path = indexed("exclude", i);
    const ordered_json& entry = list[i];
    if (!entry.is_object()) {
      problems.add(path, "expected an object of key: value or key: [values], got " + describe_value(to_plain(entry)));
      continue;
    }
    if (entry.empty()) {
      problems.add(path, "empty object: it would exclude every cell");
      continue;
    }
    ExcludeEntry e;
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      const std::string& key = it.key();
      const json value = to_plain(it.value());
      const std::string kpath = dotted(path, key);
      if (find_param(key) == nullptr) {
        problems.add(kpath, unknown_key(key, known));
        continue;
      }
      if (value.is_array() && value.empty()) {
        problems.add(kpath, "empty list: it matches no cell");
        continue;
      }
      const json items = value.is_array() ? value : json::array({value});
      for (size_t j = 0; j < items.size(); ++j) {
        const std::string vpath = value.is_array() ? indexed(kpath, j) : kpath;
        if (items[j].is_array() || items[j].is_object()) {
          problems.add(vpath, "expected a single value, got " + describe_value(items[j]));
          continue;
        }
        if (auto c = check_value(key, items[j], vpath, problems)) e[key].push_back(std::move(*c));
      }
    }
    out.push_back(std::move(e));
  }
  return out;
}

// All given keys equal; a key the cell does not have (it did not apply) does not match.
bool excluded(const json& cfg, const std::vector<ExcludeEntry>& excludes) {
  for (const auto& e : excludes) {
    bool all = !e.empty();
    for (const auto& [key, allowed] : e) {
      auto it = cfg.find(key);
      if (it == cfg.end() || std::find(allowed.begin(), allowed.end(), *it) == allowed.end()) {
        all = false;
        break;
      }
    }
    if (all) return true;
  }
  return false;
}

// A grid or cell file's text; an unreadable file is bad input (exit 2).
std::string read_input(const std::string& path) {
  try {
    return read_text(path);
  } catch (const std::runtime_error& e) {
    throw InputError({e.what()});
  }
}

const std::vector<std::string> kTopLevelKeys = {"name",    "description", "axes",    "fixed", "include",
                                                "exclude", "resources",   "command", "claims"};

// The keys a command section declares (experiments/command.h), for validating the rest.
std::optional<CommandSection> read_command(const json& section, const std::string& path, Problems& problems,
                                           CommandSection* partial = nullptr) {
  std::vector<std::pair<std::string, std::string>> found;
  auto s = read_command_section(section, path, &found, partial);
  for (const auto& [where, msg] : found) problems.add(where, msg);
  return s;
}

}  // namespace

const std::vector<ParamSpec>& resource_specs() {
  static const std::vector<ParamSpec> specs = [] {
    std::vector<ParamSpec> v(8);
    v[0].name = "gpus_per_cell", v[0].type = ParamType::integer, v[0].min = 1, v[0].max = 1024;
    v[1].name = "timeout_s", v[1].type = ParamType::number, v[1].min = 0;
    v[2].name = "retries", v[2].type = ParamType::integer, v[2].min = 0, v[2].max = 100;
    // At least 1 s: a rank sends a heartbeat every rank_timeout_s / 8 (liveness.h).
    v[3].name = "rank_timeout_s", v[3].type = ParamType::number, v[3].min = 1;
    v[4].name = "cells_per_gpu", v[4].type = ParamType::integer, v[4].min = 1, v[4].max = kMaxCellsPerGpu;
    v[4].description =
        "cells (each its own child process) that share one GPU: a rank has GPUs x cells_per_gpu slots; ignored on "
        "CPU slots; run --cells-per-gpu overrides it";
    v[5].name = "gpu_memory_gib", v[5].type = ParamType::number, v[5].min = 0;
    v[5].description =
        "memory of one GPU in GiB that cells_per_gpu cells must fit in (plan and run refuse a cells_per_gpu that "
        "cannot); 0: the visible GPU's, and plan does not check without one";
    v[6].name = "fuse", v[6].type = ParamType::integer, v[6].min = 1, v[6].max = kMaxFuse;
    v[6].description =
        "cells trained as one: up to this many alike cells of a task that fuses (icl_regression: cells that differ "
        "only in init_seed, init_std, seed, activation, degree, scale, lr) share one child process on a slot, "
        "and those of one data seed share every batch; results are those of each cell alone. 1: one cell a "
        "process. Default: on CPU slots the task's (icl_regression 16), on GPU slots 1; run --fuse overrides it";
    v[7].name = "cost_s", v[7].type = ParamType::number, v[7].min = 0;
    v[7].description =
        "seconds one cell takes on one CPU slot, as you know it (a command cell's program: attnsweep cannot tell); "
        "plan and run's ETA use it instead of their own estimate";
    return v;
  }();
  return specs;
}

Grid load_grid(const std::string& path) {
  return parse_grid(read_input(path), path);
}

namespace {

// One override value: JSON where it parses as JSON, else the bare text.
ordered_json override_value(const std::string& text) {
  try {
    return ordered_json::parse(text);
  } catch (const std::exception&) {
    return text;
  }
}

// The values of `a,b,c` split at the commas outside brackets and quotes.
std::vector<std::string> split_values(const std::string& v) {
  std::vector<std::string> out(1);
  int depth = 0;
  bool quoted = false;
  for (size_t i = 0; i < v.size(); ++i) {
    const char c = v[i];
    if (c == '"' && (i == 0 || v[i - 1] != '\\')) quoted = !quoted;
    if (!quoted && (c == '[' || c == '{')) ++depth;
    if (!quoted && (c == ']' || c == '}')) --depth;
    if (c == ',' && !quoted && depth == 0)
      out.emplace_back();
    else
      out.back() += c;
  }
  return out;
}

}  // namespace

std::string grid_text_with_overrides(const std::string& path, const std::vector<std::string>& overrides) {
  const std::string text = read_input(path);
  if (overrides.empty()) return text;
  ordered_json root = parse_json_text(text, path);
  std::vector<std::string> problems;
  if (!root.is_object()) throw InputError({path + ": expected a JSON object (a grid) to apply the overrides to"});
  for (const std::string& word : overrides) {
    const std::string w = !word.empty() && word[0] == '+' ? word.substr(1) : word;
    const size_t eq = w.find('=');
    const std::string key = w.substr(0, eq);
    if (eq == std::string::npos || key.empty() || key.find_first_of(" \t\"{}[],") != std::string::npos) {
      problems.push_back("override \"" + word +
                         "\": expected key=value or key=a,b,c (Hydra's form, after the grid file)");
      continue;
    }
    const std::string value = w.substr(eq + 1);
    if (key.rfind("resources.", 0) == 0) {
      root["resources"][key.substr(10)] = override_value(value);
      continue;
    }
    if (key.find('.') != std::string::npos) {
      problems.push_back("override \"" + word + "\": a dotted key names a resource (resources.retries=3), got \"" +
                         key + "\"");
      continue;
    }
    std::vector<std::string> parts = split_values(value);
    // range(a,b[,step]) (Python's: b excluded) and [a,b,...] sweep too: no key takes a list.
    std::vector<long long> range_args;  // range(a,b[,step]): its integers, else empty
    if (value.rfind("range(", 0) == 0 && value.back() == ')') {
      std::string inner = value.substr(6, value.size() - 7);
      std::erase_if(inner, [](char ch) { return ch == ' ' || ch == '\t'; });
      bool ok = !inner.empty();
      for (size_t start = 0; ok;) {
        const size_t comma = inner.find(',', start);
        const std::string num = inner.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        const size_t digits = num.rfind('-', 0) == 0 ? 1 : 0;
        ok = num.size() > digits && num.size() < 18 && num.find_first_not_of("0123456789", digits) == std::string::npos;
        if (ok) range_args.push_back(std::stoll(num));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
      if (!ok || range_args.size() < 2 || range_args.size() > 3) range_args.clear();
    }
    if (!range_args.empty()) {
      const long long a = range_args[0], b = range_args[1], step = range_args.size() == 3 ? range_args[2] : 1;
      if (step == 0 || (b - a) / step > 100000 || (step > 0 ? a >= b : a <= b)) {
        problems.push_back("override \"" + word +
                           "\": range(a,b[,step]) is empty or too long (Python's range: b excluded, step not 0)");
        continue;
      }
      parts.clear();
      for (long long x = a; step > 0 ? x < b : x > b; x += step) parts.push_back(std::to_string(x));
      if (parts.size() == 1) parts.push_back(parts[0]);  // an axis of one value: as key=a
    } else if (value.size() >= 2 && value.front() == '[' && value.back() == ']') {
      const ordered_json list = override_value(value);
      if (list.is_array() && !list.empty()) {
        parts.clear();
        for (const auto& x : list) parts.push_back(x.dump());
        if (parts.size() == 1) parts.push_back(parts[0]);
      }
    } else if (value.rfind("range(", 0) == 0) {
      problems.push_back("override \"" + word +
                         "\": expected range(a,b) or range(a,b,step) with integers; the grammar: key=value, key=a,b,c, "
                         "key=[a,b,c], key=range(a,b[,step])");
      continue;
    }
    if (parts.size() > 1) {
      ordered_json axis = ordered_json::array();
      for (const std::string& p : parts) axis.push_back(override_value(p));
      root["axes"][key] = axis;
      if (root.contains("fixed") && root["fixed"].is_object()) root["fixed"].erase(key);
    } else {
      root["fixed"][key] = override_value(value);
      if (root.contains("axes") && root["axes"].is_object()) root["axes"].erase(key);
    }
  }
  if (!problems.empty()) throw InputError(problems);
  return root.dump(2) + "\n";
}

std::vector<std::string> grid_warnings(const Grid& grid) {
  size_t n = 0;
  const Cell* first = nullptr;
  for (const Cell& c : grid.cells) {
    const auto w = c.config.find("warmup_steps"), st = c.config.find("steps");
    if (w != c.config.end() && st != c.config.end() && w->is_number() && st->is_number() &&
        w->get<double>() > st->get<double>()) {
      if (!first) first = &c;
      ++n;
    }
  }
  if (!first) return {};
  return {grid.file + ": " + std::to_string(n) + " cell" + (n == 1 ? "" : "s") + " with warmup_steps above steps (" +
          first->id + ": warmup_steps " + first->config.at("warmup_steps").dump() + ", steps " +
          first->config.at("steps").dump() +
          "): the learning rate never leaves its warm-up; set warmup_steps (default 100) below steps"};
}

std::vector<std::string> swept_keys(const Grid& grid) {
  std::set<std::string> keys;
  for (const Cell& c : grid.cells)
    for (const auto& [k, v] : c.config.items()) keys.insert(k);
  std::vector<std::string> out;
  for (const std::string& k : keys) {
    const json* first = nullptr;
    bool varies = false;
    for (const Cell& c : grid.cells) {
      const auto it = c.config.find(k);
      if (it == c.config.end()) {
        varies = true;
        break;
      }
      if (!first) first = &*it;
      if (*it != *first) {
        varies = true;
        break;
      }
    }
    if (varies) out.push_back(k);
  }
  return out;
}

json swept_values(const json& config, const std::vector<std::string>& keys) {
  json out = json::object();
  for (const std::string& k : keys)
    if (const auto it = config.find(k); it != config.end()) out[k] = *it;
  return out;
}

std::string swept_text(const json& config, const std::vector<std::string>& keys) {
  std::string line;
  const json values = swept_values(config, keys);
  for (const auto& [k, v] : values.items()) line += (line.empty() ? "" : " ") + k + "=" + format_value(v);
  return line;
}

std::string format_value(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

Grid load_grid(const std::string& path, const std::vector<std::string>& overrides) {
  if (overrides.empty()) return load_grid(path);
  Grid g;
  try {
    g = parse_grid(grid_text_with_overrides(path, overrides), path);
    // A key no cell takes would be dropped from every cell: refused, unless asked for with
    // a leading + (Hydra's +key=value). Like Hydra's struct mode.
    std::set<std::string> keys;
    for (const Cell& c : g.cells)
      for (const auto& [k, v] : c.config.items()) keys.insert(k);
    const std::vector<std::string> key_list(keys.begin(), keys.end());
    std::vector<std::string> problems;
    for (const std::string& word : overrides) {
      if (word.empty() || word[0] == '+' || word.rfind("resources.", 0) == 0) continue;
      const std::string key = word.substr(0, word.find('='));
      if (keys.count(key)) continue;
      const std::string s = closest_match(key, key_list);
      problems.push_back(path + ": override \"" + word + "\": no cell of this grid takes " + key +
                         (s.empty() ? "" : " (did you mean \"" + s + "\"?)") + "; +" + word +
                         " sets it anyway (it is then dropped where it does not apply)");
    }
    if (!problems.empty()) throw InputError(problems);
  } catch (InputError& e) {
    std::string words;
    for (const std::string& o : overrides) words += " " + o;
    e.problems.push_back("(" + path + " with the overrides" + words + ")");
    throw;
  }
  g.overrides = overrides;
  return g;
}

namespace {

// One grid file read into cells: each part of the format in its own step, every problem
// collected (Problems) and thrown together at the end.
class GridReader {
 public:
  GridReader(const std::string& text, const std::string& file_label)
      : root_(parse_json_text(text, file_label)), problems_(file_label) {
    grid_.file = file_label;
    grid_.name = std::filesystem::path(file_label).stem().string();
  }

  Grid read() {
    if (!root_.is_object()) {
      problems_.add("", "expected a JSON object with axes, fixed, include, exclude, resources at the top level, got " +
                            describe_value(to_plain(root_)));
      problems_.throw_if_any();
    }
    grid_.source = to_plain(root_);
    read_top_level();
    if (root_.contains("command")) {
      // The program's declared keys are keys of this grid's cells from here on; the section
      // itself reaches every cell as its `command` key (a cell file is self-contained).
      CommandSection partial;
      if (auto c = read_command(to_plain(root_["command"]), "command", problems_, &partial)) {
        declared_.emplace(std::move(c->keys));
        fixed_["command"] = Sourced{json(c->text), "command"};
      } else {
        declared_.emplace(std::move(partial.keys));  // the keys declared well, for checking the rest
        cells_ok_ = false;
      }
    }
    if (root_.contains("axes")) axes_ = read_axes(root_["axes"], problems_, cells_ok_);
    read_fixed();
    read_includes();
    if (root_.contains("exclude")) excludes_ = read_excludes(root_["exclude"], problems_);
    if (root_.contains("resources")) grid_.resources = read_resources(root_["resources"], problems_);
    make_cells();
    if (problems_.empty() && grid_.cells.empty())
      problems_.add(excludes_.empty() ? "" : "exclude", "removes every cell; the grid has no cells left");
    if (root_.contains("claims")) read_claims();
    problems_.throw_if_any();
    std::vector<std::string> ids;
    for (const auto& c : grid_.cells) ids.push_back(c.id);
    std::sort(ids.begin(), ids.end());
    grid_.hash = sha256_hex(join_lines(ids));
    return std::move(grid_);
  }

 private:
  // Keys unknown at the top level are reported; a parameter there gets a pointer to axes/fixed.
  // A misspelt "axis" or "fixd" held cell values: cells built without it would only add noise.
  void read_top_level() {
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      const std::string& key = it.key();
      if (std::find(kTopLevelKeys.begin(), kTopLevelKeys.end(), key) != kTopLevelKeys.end()) continue;
      cells_ok_ = false;
      if (find_param(key) != nullptr)
        problems_.add(key, "unknown top-level key; parameters go in \"axes\" or \"fixed\"");
      else
        problems_.add(key, unknown_key(key, kTopLevelKeys));
    }
    for (const char* key : {"name", "description"}) {
      if (!root_.contains(key)) continue;
      if (!root_[key].is_string())
        problems_.add(key, "expected a string, got " + describe_value(to_plain(root_[key])));
      else if (std::string(key) == "name")
        grid_.name = root_[key].get<std::string>();
    }
  }

  // The claims (results/claims.h): each well formed, naming keys and a metric the cells
  // have, and testable by the cells (two groups with cells, two units or more, ...).
  void read_claims() {
    std::vector<std::pair<std::string, std::string>> found;
    grid_.claims = parse_claims(to_plain(root_["claims"]), found);
    for (const auto& [path, msg] : found) problems_.add(path, msg);
    if (!problems_.empty()) return;  // the cells are not known well enough to test against
    std::set<std::string> keys, tasks;
    std::vector<ClaimCell> cells;
    for (const Cell& c : grid_.cells) {
      ClaimCell cell;
      for (const auto& [k, v] : c.config.items()) {
        keys.insert(k);
        cell.values[k] = label_value(v);
      }
      tasks.insert(c.config.value("task", ""));
      cells.push_back(std::move(cell));
    }
    const std::vector<std::string> key_list(keys.begin(), keys.end());
    for (size_t i = 0; i < grid_.claims.size(); ++i) {
      const Claim& claim = grid_.claims[i];
      const std::string at = indexed("claims", i);
      bool ok = true;
      for (const auto& [path, key] : claim_keys(claim, i)) {
        if (keys.count(key)) continue;
        const std::string s = closest_match(key, key_list);
        problems_.add(path,
                      "no cell of this grid has the key " + key + (s.empty() ? "" : " (did you mean \"" + s + "\"?)"));
        ok = false;
      }
      // The metric: a final metric of every task among the cells (a command task's are its
      // own), or a statistic of a [T, L, H] trajectory the task writes (results/trajectory_metric.h).
      std::string problem;
      if (const auto tm = parse_trajectory_metric(claim.metric, &problem)) {
        const ResultField* f = find_result_field(ResultKind::dataset, tm->path);
        for (const std::string& t : tasks)
          if (f == nullptr || !written_for(*f, t) || f->shape.size() != 3) {
            problems_.add(at + ".metric", tm->path + " is no [T, L, H] trajectory of task " + t);
            ok = false;
            break;
          }
        for (const Cell& cell : grid_.cells)
          if (ok && cell.config.contains("layers") && cell.config["layers"].get<int64_t>() < tm->layer) {
            problems_.add(at + ".metric", "layer " + std::to_string(tm->layer) + " is beyond the cells' layers (" +
                                              cell.config["layers"].dump() + ")");
            ok = false;
          }
      } else if (!problem.empty()) {
        problems_.add(at + ".metric", problem);
        ok = false;
      } else if (!tasks.count("command")) {
        const ResultField* f = find_result_field(ResultKind::final_metric, claim.metric);
        for (const std::string& t : tasks) {
          if (f != nullptr && written_for(*f, t)) continue;
          std::vector<std::string> names;
          for (const ResultField& r : result_schema())
            if (r.kind == ResultKind::final_metric && written_for(r, t)) names.push_back(r.name);
          const std::string s = closest_match(claim.metric, names);
          problems_.add(at + ".metric", claim.metric + " is no final metric of task " + t +
                                            (s.empty() ? "" : " (did you mean \"" + s + "\"?)"));
          ok = false;
          break;
        }
      }
      if (!ok) continue;
      const ClaimData d = claim_data(claim, cells, key_list);
      if (std::string why = untestable_reason(claim, d); !why.empty())
        problems_.add(at, "this grid cannot test the claim \"" + claim.id + "\": " + why);
    }
  }

  void read_fixed() {
    if (!root_.contains("fixed")) return;
    const ordered_json& f = root_["fixed"];
    if (!f.is_object()) {
      problems_.add("fixed", "expected an object of key: value, got " + describe_value(to_plain(f)));
      cells_ok_ = false;
    } else {
      cells_ok_ &= read_flat(f, "fixed", problems_, fixed_);
    }
  }

  void read_includes() {
    if (!root_.contains("include")) return;
    const ordered_json& inc = root_["include"];
    if (!inc.is_array()) {
      problems_.add("include", "expected a list of objects, got " + describe_value(to_plain(inc)));
      return;
    }
    for (size_t i = 0; i < inc.size(); ++i) {
      const std::string path = indexed("include", i);
      if (!inc[i].is_object()) {
        problems_.add(path, "expected an object of key: value, got " + describe_value(to_plain(inc[i])));
        includes_.emplace_back();
        continue;
      }
      Values v;
      includes_.emplace_back(read_flat(inc[i], path, problems_, v) ? std::optional<Values>(std::move(v))
                                                                   : std::nullopt);
    }
  }

  // The product of the axes' lengths, or 0 (and a problem) beyond kMaxProduct.
  uint64_t product() {
    uint64_t product = 1;
    for (const auto& a : axes_) {
      product *= a.values.size();
      if (product > kMaxProduct) {
        problems_.add("axes", "the product of the axes has more than " + std::to_string(kMaxProduct) + " cells");
        cells_ok_ = false;
        return 0;
      }
    }
    return product;
  }

  // The product over no axes is one cell (fixed alone) unless include lists the cells.
  // Parts that were bad build no cells, so one mistake is not echoed by every cell.
  void make_cells() {
    const uint64_t n = product();
    const bool product_cells = !axes_.empty() || includes_.empty();
    if (cells_ok_ && product_cells && n > 0) {
      // Odometer over the axes in the user's order; the last axis varies fastest.
      std::vector<size_t> idx(axes_.size(), 0);
      for (;;) {
        Values own;
        for (size_t a = 0; a < axes_.size(); ++a) own[axes_[a].key] = axes_[a].values[idx[a]];
        add_cell(own, "");
        size_t a = axes_.size();
        while (a > 0 && ++idx[a - 1] == axes_[a - 1].values.size()) idx[--a] = 0;
        if (a == 0) break;
      }
    }
    if (cells_ok_)
      for (size_t i = 0; i < includes_.size(); ++i)
        if (includes_[i]) add_cell(*includes_[i], indexed("include", i));
  }

  void add_cell(const Values& own, const std::string& missing_prefix) {
    Values merged = fixed_;
    for (const auto& [k, v] : own) merged[k] = v;
    // resources.gpus_per_cell is the default of a training cell's `devices` (the k
    // slots of one rank it trains on, data-parallel); a cell's own `devices` wins.
    if (grid_.resources.gpus_per_cell != 1 && !merged.count("devices"))
      merged["devices"] = Sourced{json(grid_.resources.gpus_per_cell), "resources.gpus_per_cell"};
    auto cfg = resolve(merged, missing_prefix, problems_);
    if (!cfg || excluded(*cfg, excludes_)) return;
    std::string canon = canonical_json(*cfg);
    if (!seen_.insert(canon).second) return;  // identical effective configs are one cell
    Cell c;
    c.id = sha256_hex(canon).substr(0, 16);
    c.est_cost_s = estimate_cost_s(*cfg);
    if (grid_.resources.cost_s >= 0) c.est_cost_s = grid_.resources.cost_s;
    c.config = std::move(*cfg);
    grid_.cells.push_back(std::move(c));
  }

  const ordered_json root_;
  Problems problems_;
  std::optional<DeclaredKeysScope> declared_;
  Grid grid_;
  bool cells_ok_ = true;
  std::vector<Axis> axes_;
  Values fixed_;
  std::vector<std::optional<Values>> includes_;  // nullopt: a bad entry
  std::vector<ExcludeEntry> excludes_;
  std::unordered_set<std::string> seen_;  // canonical configs of the cells so far
};

}  // namespace

Grid parse_grid(const std::string& text, const std::string& file_label) {
  return GridReader(text, file_label).read();
}

json load_cell_config(const std::string& path) {
  const ordered_json root = parse_json_text(read_input(path), path);
  return effective_config(to_plain(root), path);
}

json effective_config(const json& cell_values, const std::string& file_label) {
  Problems problems(file_label);
  if (!cell_values.is_object()) {
    problems.add("", "expected a JSON object of key: value, got " + describe_value(cell_values));
    problems.throw_if_any();
  }
  // A command cell's config carries its section: its declared keys are known from there.
  std::optional<DeclaredKeysScope> declared;
  if (auto it = cell_values.find("command"); it != cell_values.end() && it->is_string()) {
    json section;
    try {
      section = json::parse(it->get<std::string>());
    } catch (const std::exception&) {
      problems.add("command", "expected the JSON text of a command section, got " + describe_value(*it));
      problems.throw_if_any();
    }
    auto c = read_command(section, "command", problems);
    problems.throw_if_any();
    declared.emplace(std::move(c->keys));
  }
  Values values;
  const bool ok = read_flat(cell_values, "", problems, values);
  std::optional<json> cfg;
  if (ok) cfg = resolve(values, "", problems);
  problems.throw_if_any();
  return *cfg;
}

std::string canonical_json(const json& config) {
  // nlohmann::json keeps object keys sorted and prints doubles in their shortest
  // round-trip form; configs from effective_config already hold canonical number types.
  return config.dump();
}

std::string cell_id(const json& config) {
  return sha256_hex(canonical_json(config)).substr(0, 16);
}

}  // namespace attnsweep
