// The command task: a cell runs the user's own program (docs/own-code.md). The program is
// started without a shell, in the cell's process group (base/process.h), so the slot's
// SIGTERM/SIGUSR1, a timeout's TERM and KILL and a lost parent reach it as they reach a
// built-in task; it appends JSON lines to a metrics file, and this task turns them into
// the TaskOutput that run_cell writes to the result file like any other task's.
#include "experiments/command.h"
#include "base/options.h"

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>

#include "base/process.h"
#include "base/sha256.h"
#include "command_helper.h"
#include "experiments/command_metrics.h"
#include "experiments/registry.h"
#include "experiments/task.h"

namespace attnsweep {

namespace {

namespace fs = std::filesystem;
using Problems = std::vector<std::pair<std::string, std::string>>;

// Keys every command cell has already (task, seed, command, grace_s): not the program's to declare.
bool reserved_key(const std::string& name) {
  if (name == "task" || name == "command") return true;
  for (const ParamSpec& s : command_task().keys)
    if (s.name == name) return true;
  for (const ParamSpec* s : cell_param_specs(nullptr)) {
    if (s->name != name) continue;
    try {
      if (!s->applies || s->applies(json{{"task", "command"}})) return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

const std::vector<std::string> kTypes = {"integer", "number", "string", "boolean"};

std::optional<ParamSpec> read_key(const std::string& name, const json& decl, const std::string& path,
                                  Problems* problems, json* canonical) {
  const json obj = decl.is_string() ? json{{"type", decl}} : decl;
  if (!obj.is_object() || !obj.contains("type") || !obj["type"].is_string()) {
    problems->push_back({path,
                         "expected one of integer, number, string, boolean, or an object with \"type\" and "
                         "optionally default, min, max, choices, description; got " +
                             describe_value(decl)});
    return std::nullopt;
  }
  const std::vector<std::string> fields = {"type", "default", "min", "max", "choices", "description"};
  bool ok = true;
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (std::find(fields.begin(), fields.end(), it.key()) == fields.end()) {
      std::string msg = "unknown field";
      if (auto m = closest_match(it.key(), fields); !m.empty()) msg += " (did you mean " + json(m).dump() + "?)";
      problems->push_back({path + "." + it.key(), msg});
      ok = false;
    }
  const std::string type = obj["type"].get<std::string>();
  if (std::find(kTypes.begin(), kTypes.end(), type) == kTypes.end()) {
    std::string msg = "unknown type " + json(type).dump();
    if (auto m = closest_match(type, kTypes); !m.empty()) msg += " (did you mean " + json(m).dump() + "?)";
    problems->push_back(
        {path + (decl.is_string() ? "" : ".type"), msg + "; expected integer, number, string or boolean"});
    return std::nullopt;
  }
  const bool numeric = type == "integer" || type == "number";
  for (const char* bound : {"min", "max"})
    if (obj.contains(bound) && (!numeric || !obj[bound].is_number())) {
      problems->push_back({path + "." + bound, numeric ? "expected a number, got " + describe_value(obj[bound])
                                                       : "only an integer or number key has a bound"});
      ok = false;
    }
  std::vector<std::string> choices;
  if (obj.contains("choices")) {
    if (type != "string" || !obj["choices"].is_array() || obj["choices"].empty()) {
      problems->push_back({path + ".choices", "expected a non-empty list of strings for a string key"});
      ok = false;
    } else {
      for (const json& c : obj["choices"])
        if (c.is_string())
          choices.push_back(c.get<std::string>());
        else
          ok = false, problems->push_back({path + ".choices", "expected strings, got " + describe_value(c)});
    }
  }
  if (obj.contains("description") && !obj["description"].is_string()) {
    problems->push_back({path + ".description", "expected a string"});
    ok = false;
  }
  if (!ok) return std::nullopt;
  const double lo = obj.contains("min") ? obj["min"].get<double>() : -kNoBound;
  const double hi = obj.contains("max") ? obj["max"].get<double>() : kNoBound;
  const std::string what = obj.value("description", std::string("the program's own key (declared in the grid)"));
  ParamSpec spec = type == "integer"  ? integer_key(name, lo, hi, json(), what)
                   : type == "number" ? number_key(name, lo, hi, json(), what)
                   : type == "string" ? string_key(name, choices, json(), what)
                                      : boolean_key(name, json(), what);
  json canon = obj;
  if (obj.contains("default")) {
    std::string problem;
    json d = canonical_value(spec, obj["default"], &problem);
    if (d.is_null()) {
      problems->push_back({path + ".default", problem});
      return std::nullopt;
    }
    spec.default_value = [d](const json&) { return d; };
    canon["default"] = d;
  }
  *canonical = canon.size() == 1 ? canon["type"] : canon;
  return spec;
}

// Each "{key}" of arg replaced by value(key); "{{" and "}}" are literal braces. "" and
// *problem set on a malformed argument.
template <class Value>
std::string substitute(const std::string& arg, Value value, std::string* problem) {
  std::string out;
  for (size_t i = 0; i < arg.size(); ++i) {
    const char c = arg[i];
    if ((c == '{' || c == '}') && i + 1 < arg.size() && arg[i + 1] == c) {
      out += c;
      ++i;
    } else if (c == '{') {
      const size_t end = arg.find('}', i);
      if (end == std::string::npos) {
        *problem = "an unclosed \"{\" (write \"{{\" for a literal brace)";
        return "";
      }
      const std::string key = arg.substr(i + 1, end - i - 1);
      std::string v;
      if (!value(key, &v, problem)) return "";
      out += v;
      i = end;
    } else if (c == '}') {
      *problem = "a \"}\" without its \"{\" (write \"}}\" for a literal brace)";
      return "";
    } else {
      out += c;
    }
  }
  return out;
}

// A config value as the program's argument sees it: strings as they are, numbers as JSON.
std::string as_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::vector<std::string> config_keys(const json& cfg) {
  std::vector<std::string> keys;
  for (auto it = cfg.begin(); it != cfg.end(); ++it) keys.push_back(it.key());
  return keys;
}

// "" when every "{key}" of the argv is a key of cfg, else the problem with its argument.
std::string check_argv(const std::vector<std::string>& argv, const json& cfg) {
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string problem;
    substitute(
        argv[i],
        [&](const std::string& key, std::string* v, std::string* why) {
          if (cfg.contains(key)) return *v = as_text(cfg[key]), true;
          if (key == "args" && argv[i] == "{args}") return true;  // every key as --key=value (command_argv)
          if (key == "args") {
            *why = "{args} stands alone as an argument (it becomes one --key=value argument per key)";
            return false;
          }
          *why = "{" + key + "} is not a key of the cell";
          if (auto m = closest_match(key, config_keys(cfg)); !m.empty()) *why += " (did you mean " + m + "?)";
          *why += "; its keys: declare it under command.keys";
          return false;
        },
        &problem);
    if (!problem.empty()) return "argv[" + std::to_string(i) + "] " + json(argv[i]).dump() + ": " + problem;
  }
  return "";
}

std::optional<CommandSection> section_of(const json& config) {
  Problems problems;
  json section;
  try {
    section = json::parse(config.at("command").get<std::string>());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("command: not the JSON text of a command section (") + e.what() + ")");
  }
  auto s = read_command_section(section, "command", &problems);
  if (!s) throw std::runtime_error(problems.at(0).first + ": " + problems.at(0).second);
  return s;
}

// A directory of the attempt's own under $TMPDIR, removed with everything in it. A cell
// with a checkpoint path has one name for all its attempts (from a hash of that path): an
// attempt killed outright (a timeout's SIGKILL) cannot remove its own, and the next attempt
// of the cell on that node clears it first, so at most one is left per cell.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& checkpoint) {
    const fs::path tmp = fs::temp_directory_path();
    if (!checkpoint.empty()) {
      path_ = tmp / ("attnsweep-cell-" + sha256_hex(fs::absolute(checkpoint).string()).substr(0, 16));
      std::error_code ec;
      fs::remove_all(path_, ec);
      if (fs::create_directory(path_, ec) && !ec) return;
      throw std::runtime_error("command: cannot make the scratch directory " + path_.string() + " (" + ec.message() +
                               ")");
    }
    std::string tmpl = (tmp / "attnsweep-cell-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      throw std::runtime_error("command: cannot make a scratch directory under " + tmp.string());
    path_ = tmpl;
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  if (!f.flush()) throw std::runtime_error("command: cannot write " + path.string());
}

}  // namespace

std::optional<CommandSection> read_command_section(const json& section, const std::string& path, Problems* problems,
                                                   CommandSection* partial) {
  const size_t before = problems->size();
  if (!section.is_object()) {
    problems->push_back({path, "expected an object {\"argv\": [program, args ...], \"keys\": {name: type}}, got " +
                                   describe_value(section)});
    return std::nullopt;
  }
  CommandSection out;
  const std::vector<std::string> fields = {"argv", "keys"};
  for (auto it = section.begin(); it != section.end(); ++it)
    if (std::find(fields.begin(), fields.end(), it.key()) == fields.end()) {
      std::string msg = "unknown key";
      if (auto m = closest_match(it.key(), fields); !m.empty()) msg += " (did you mean " + json(m).dump() + "?)";
      problems->push_back({path + "." + it.key(), msg});
    }
  const json argv = section.value("argv", json());
  if (!argv.is_array() || argv.empty()) {
    problems->push_back({path + ".argv", argv.is_null()
                                             ? "missing; expected the program and its arguments, a list "
                                               "of strings"
                                             : "expected a non-empty list of strings, got " + describe_value(argv)});
  } else {
    for (size_t i = 0; i < argv.size(); ++i)
      if (argv[i].is_string())
        out.argv.push_back(argv[i].get<std::string>());
      else
        problems->push_back(
            {path + ".argv[" + std::to_string(i) + "]", "expected a string, got " + describe_value(argv[i])});
  }
  json keys_canon = json::object();
  if (section.contains("keys")) {
    const json& keys = section["keys"];
    if (!keys.is_object()) {
      problems->push_back({path + ".keys", "expected an object of name: type, got " + describe_value(keys)});
    } else {
      for (auto it = keys.begin(); it != keys.end(); ++it) {
        const std::string kpath = path + ".keys." + it.key();
        if (!is_identifier(it.key())) {
          problems->push_back({kpath, "expected a name of letters, digits and _"});
        } else if (reserved_key(it.key())) {
          problems->push_back({kpath, "every command cell has this key already: it is not the program's to declare"});
        } else if (auto spec = read_key(it.key(), it.value(), kpath, problems, &keys_canon[it.key()])) {
          out.keys.push_back(std::move(*spec));
        }
      }
    }
  }
  if (problems->size() != before) {
    if (partial) *partial = std::move(out);
    return std::nullopt;
  }
  out.text = json{{"argv", out.argv}, {"keys", keys_canon}}.dump();
  return out;
}

std::vector<std::string> command_argv(const json& config) {
  const std::optional<CommandSection> s = section_of(config);
  if (const std::string why = check_argv(s->argv, config); !why.empty()) throw std::runtime_error("command." + why);
  std::vector<std::string> out;
  for (const std::string& a : s->argv) {
    // {args} alone (and no key named args): every key of the cell the program takes (its
    // declared keys and seed) as --key=value, in key order, as argparse and Hydra read them.
    if (a == "{args}" && !config.contains("args")) {
      for (auto it = config.begin(); it != config.end(); ++it)
        if (it.key() != "command" && it.key() != "grace_s" && it.key() != "task")
          out.push_back("--" + it.key() + "=" + as_text(it.value()));
      continue;
    }
    std::string problem;
    out.push_back(substitute(
        a,
        [&](const std::string& key, std::string* v, std::string*) {
          *v = as_text(config[key]);
          return true;
        },
        &problem));
  }
  return out;
}

TaskOutput run_command_attempt(const json& config, const TaskContext& ctx);

// A failure that would repeat (a malformed metrics line, no final record) leaves no
// checkpoint and no metrics lines behind: the fixed program then starts afresh instead of
// resuming into the old lines (docs/own-code.md, "retrying a failed cell").
TaskOutput run_command(const json& config, const TaskContext& ctx) {
  try {
    return run_command_attempt(config, ctx);
  } catch (const DeterministicError&) {
    if (!ctx.checkpoint_path.empty()) {
      std::error_code ec;
      fs::remove_all(ctx.checkpoint_path, ec);
      fs::remove(ctx.checkpoint_path + kCommandMetricsSuffix, ec);
    }
    throw;
  }
}

TaskOutput run_command_attempt(const json& config, const TaskContext& ctx) {
  const std::vector<std::string> argv = command_argv(config);
  const double grace_s = config.at("grace_s").get<double>();
  ScratchDir scratch(ctx.checkpoint_path);
  const fs::path python = scratch.path() / "python";
  fs::create_directories(python);
  write_file(python / "attnsweep_cell.py", kCommandHelperPy);
  write_file(scratch.path() / "config.json", config.dump(2) + "\n");
  // The checkpoint and the metrics logged before it survive a requeue (DIR/checkpoints/);
  // without a checkpoint path (a bare `attnsweep train`) both live in the scratch directory.
  const std::string checkpoint =
      ctx.checkpoint_path.empty() ? (scratch.path() / "checkpoint").string() : ctx.checkpoint_path;
  const std::string metrics = ctx.checkpoint_path.empty() ? (scratch.path() / "metrics.jsonl").string()
                                                          : ctx.checkpoint_path + kCommandMetricsSuffix;
  // The cell's own output folder, kept (weights, plots): DIR/outputs/<cell id> under `run`
  // (beside DIR/checkpoints/), else in the scratch directory (removed with it).
  const fs::path output_dir = !ctx.checkpoint_path.empty() && !ctx.cell_id.empty()
                                  ? fs::path(ctx.checkpoint_path).parent_path().parent_path() / "outputs" / ctx.cell_id
                                  : scratch.path() / "outputs";
  fs::create_directories(output_dir);
  const bool resuming = fs::exists(checkpoint);
  if (!resuming) write_file(metrics, "");  // from scratch: no lines of an earlier attempt
  std::printf("attnsweep: %s program: %s\n", resuming ? "resuming the" : "starting the", json(argv).dump().c_str());

  ChildSpec child;
  child.argv = argv;
  child.own_process_group = false;  // the cell's group: the slot's signals and a timeout's kill reach it
  child.what = "the cell's program";
  const char* old_path = options::launcher_env("PYTHONPATH");
  // attnsweep's attention as a PyTorch op (torch_op/, docs/pytorch.md), where the build
  // that made this binary built it: `import attnsweep_torch` works in the program too.
  std::string pythonpath = python.string();
  std::error_code ec;
  if (const fs::path op = fs::path(self_executable()).parent_path() / "python";
      fs::exists(op / "attnsweep_torch" / "__init__.py", ec))
    pythonpath += ":" + op.string();
  if (old_path && *old_path) pythonpath += std::string(":") + old_path;
  child.env = {{"ATTNSWEEP_CONFIG", (scratch.path() / "config.json").string()},
               {"ATTNSWEEP_METRICS", metrics},
               {"ATTNSWEEP_CHECKPOINT", checkpoint},
               {"ATTNSWEEP_SCRATCH", scratch.path().string()},
               {"ATTNSWEEP_OUTPUT_DIR", output_dir.string()},
               {"ATTNSWEEP_CELL_ID", ctx.cell_id},
               {"ATTNSWEEP_DEVICE", ctx.device},
               {"ATTNSWEEP_THREADS", std::to_string(ctx.threads)},
               {options::kAttempt, std::to_string(ctx.attempt)},
               {"PYTHONPATH", pythonpath}};
  for (auto it = config.begin(); it != config.end(); ++it)
    if (it.key() != "command") child.env.push_back({"ATTNSWEEP_KEY_" + it.key(), as_text(it.value())});
  std::fflush(stdout);  // the program writes to the same log: ours first
  std::fflush(stderr);
  const pid_t pid = spawn_child(child);

  using clock = std::chrono::steady_clock;
  int stop_signal = 0;
  bool killed = false;
  clock::time_point kill_at{};
  ChildExit e;
  MetricsTail tail(metrics, config);
  clock::time_point next_look = clock::now();
  for (;;) {
    e = reap_child(pid);
    if (e.pid == pid) break;
    if (clock::now() >= next_look) {
      if (const std::string bad = tail.look(ctx); !bad.empty()) {
        ::kill(pid, SIGKILL);  // it would only log more on a record that cannot be read
        while (reap_child(pid).pid != pid) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        throw DeterministicError(bad + " (the program was stopped at this line)");
      }
      next_look = clock::now() + std::chrono::milliseconds(500);
    }
    if (ctx.stop_requested() && stop_signal == 0) {
      // The group's signal reached the program too; this one covers a signal sent to us alone.
      stop_signal = ctx.stop->load();
      ::kill(pid, stop_signal);
      kill_at = clock::now() + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(grace_s));
    }
    if (stop_signal != 0 && !killed && clock::now() >= kill_at) {
      std::fprintf(stderr,
                   "attnsweep: the program did not exit within grace_s = %g s of %s: killed; the cell reruns from "
                   "its last checkpoint, or from scratch without one\n",
                   grace_s,
                   sigabbrev_np(stop_signal) ? (std::string("SIG") + sigabbrev_np(stop_signal)).c_str() : "the signal");
      ::kill(pid, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  TaskOutput out;
  // Interrupted only when a stop was asked for (a signal to us or to the group, which
  // may have reached the program before this loop saw it). An exit 75 of the program's
  // own (EX_TEMPFAIL, which ordinary programs return) is a failed attempt: retried with
  // back-off like a crash and counted, never an endless resume.
  const bool stopping = stop_signal != 0 || ctx.stop_requested();
  if (killed || (stopping && ((e.exited && e.code == kExitInterrupted) || !e.exited))) {
    out.status = CellStatus::interrupted;
    return out;
  }
  if (e.exited && e.code == kExitInterrupted)
    throw std::runtime_error("the program " + json(argv.at(0)).dump() +
                             " exited 75 (EX_TEMPFAIL) though no stop was asked for: a failed attempt (75 means "
                             "\"interrupted, resumable\" only after attnsweep's SIGTERM or SIGUSR1)");
  if (!e.exited || e.code != 0)
    throw std::runtime_error("the program " + json(argv.at(0)).dump() + " ended: " + describe_exit(e) +
                             " (its output is above in this log)");
  Metrics m = read_metrics(metrics);
  if (!m.final)
    throw DeterministicError("the program exited 0 without a final record: " + metrics + " has " +
                             std::to_string(m.steps.size()) +
                             " logged steps and no line {\"final\": {...}} (attnsweep_cell.final(...))");
  return output_of(m);
}

const TaskDef& command_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "command";
    d.description =
        "the grid's own program (its command section): run with the cell's values, its metrics lines written to the "
        "result file (docs/own-code.md)";
    d.attention = false;
    d.declared_keys = true;
    d.open_outputs = true;
    ParamSpec command = string_key("command", {}, json(),
                                   "the program and its declared keys, as canonical JSON text; set from the grid's "
                                   "command section, not written by hand");
    command.check = [](const json& value, const json& cfg) -> std::string {
      json section;
      try {
        section = json::parse(value.get<std::string>());
      } catch (const std::exception&) {
        return "expected the JSON text of a command section, got " + describe_value(value);
      }
      Problems problems;
      auto s = read_command_section(section, "command", &problems);
      if (!s) return problems[0].first + ": " + problems[0].second;
      return check_argv(s->argv, cfg);
    };
    d.keys = {command, number_key("grace_s", 0, 86400, 30.0,
                                  "seconds the program has after SIGTERM/SIGUSR1 to save its checkpoint and exit "
                                  "75 before it is killed")};
    d.cost_s = [](const json&) { return 60.0; };
    d.run = run_command;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
