#include "experiments/result_schema.h"

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <stdexcept>

#include "experiments/registry.h"

namespace attnsweep {
namespace {

using K = ResultKind;
using T = ResultType;

// The tasks the trainer trains whose target is one of `targets` (registry.h).
std::vector<std::string> trained_tasks(std::initializer_list<TaskTarget> targets) {
  std::vector<std::string> out;
  for (const TaskDef* t : task_registry())
    if (t->trains() && std::find(targets.begin(), targets.end(), t->target) != targets.end()) out.push_back(t->name);
  return out;
}

std::vector<ResultField> declare() {
  // Locals, not globals: aggregate's own statics read the schema before this file's
  // globals would be initialised.
  const std::vector<std::string> training =
      trained_tasks({TaskTarget::classes, TaskTarget::value, TaskTarget::per_token});
  std::vector<ResultField> f;
  auto root = [&](std::string name, T type, std::string description, bool column = false, std::string when = "",
                  std::string writer = "run_cell") {
    ResultField r;
    r.kind = K::root_attribute, r.name = std::move(name), r.type = type, r.writer = std::move(writer);
    r.when = std::move(when), r.description = std::move(description), r.column = column;
    f.push_back(std::move(r));
  };
  auto by_trainer = [&](ResultField r, std::vector<std::string> tasks) {
    r.writer = "trainer", r.tasks = std::move(tasks);
    f.push_back(std::move(r));
  };
  // A task's own fields of `kind`; the trainer's come before those of the first task it
  // trains (paper A's probe, which trains nothing, is first: its metrics lead summary.csv).
  auto tasks_fields = [&](ResultKind kind, const std::function<void()>& trainer_fields) {
    bool trainer_done = false;
    for (const TaskDef* t : task_registry()) {
      if (t->trains() && !trainer_done) trainer_fields(), trainer_done = true;
      for (ResultField r : t->outputs) {
        if (r.kind != kind) continue;
        r.writer = t->name, r.tasks = {t->name};
        f.push_back(std::move(r));
      }
    }
    if (!trainer_done) trainer_fields();
  };

  // Root attributes, every cell (run_cell; results/cell_file.cpp writes them). The first
  // five are aggregate's fixed columns, in this order, with these descriptions.
  root("cell_id", T::string, "content hash of the effective config", true);
  root("status", T::string, "complete or diverged", true);
  root("device", T::string, "device the cell ran on", true);
  root("wall_seconds", T::float64, "wall-clock seconds of the cell, over every attempt that led to the result", true);
  root("diverged_at_step", T::int64, "step at which the loss became NaN/Inf, -1 if none", true);
  root("config", T::string, "the effective config as canonical JSON (sorted keys, compact)");
  root("attnsweep_version", T::string, "the attnsweep version that wrote the file", false, "", "write_cell_file");
  root("started", T::string, "when the task started (its first attempt that led to the result), ISO 8601 UTC");
  root("finished", T::string, "when the task ended, ISO 8601 UTC");
  root("attempts", T::int64, "attempts that led to the result (1: none was interrupted or failed before it)");
  root("last_attempt_started", T::string, "when the last attempt started, ISO 8601 UTC");
  root("last_attempt_wall_seconds", T::float64, "wall-clock seconds of the last attempt alone");
  root("host", T::string, "host name of the machine it ran on");
  root("slurm_job_id", T::string, "SLURM_JOB_ID", false, "under Slurm");
  root("slurm_restart_count", T::string, "SLURM_RESTART_COUNT", false, "a requeued Slurm job");
  root("cuda_visible_devices", T::string, "CUDA_VISIBLE_DEVICES", false, "CUDA_VISIBLE_DEVICES is set");
  root("gpu_name", T::string, "name of the cell's first GPU", false, "on a CUDA device");
  root("gpu_uuid", T::string, "UUID of the cell's first GPU", false, "on a CUDA device");

  // /final metrics. The trainer's (worker/training/trainer.cpp): the last evaluation of the test split.
  tasks_fields(K::final_metric, [&] {
    by_trainer(make_final_metric("test_loss", "mean test loss at the end of training; NaN when the cell diverged"),
               training);
    by_trainer(make_final_metric("test_accuracy", "test accuracy at the end of training; NaN when the cell diverged",
                                 false, "", "test accuracy"),
               trained_tasks({TaskTarget::classes}));
    by_trainer(make_final_metric("test_mse", "test mean squared error (the test loss) at the end of training", true,
                                 "complete cells", "test MSE"),
               trained_tasks({TaskTarget::value, TaskTarget::per_token}));
    by_trainer(make_final_metric("test_rel_l2",
                                 "mean relative L2 error of the predicted u(., T) on the test split; NaN when the "
                                 "cell diverged"),
               trained_tasks({TaskTarget::per_token}));
    by_trainer(make_final_metric("train_loss", "training loss of the last logged step (NaN without steps)"), training);
  });

  // Datasets. The trainer's, over training: per logged step, then per evaluation.
  tasks_fields(K::dataset, [&] {
    const std::vector<std::string> t = {"logged_steps"}, e = {"evals"}, tlh = {"logged_steps", "layers", "heads"};
    auto trainer_set = [&](std::string path, T type, std::vector<std::string> shape, std::string description,
                           std::string label = "") {
      by_trainer(
          make_dataset(std::move(path), type, std::move(shape), std::move(description), true, "", std::move(label)),
          training);
    };
    trainer_set("/train/step", T::int64, t, "optimizer step (0-based) of each logged row");
    trainer_set("/train/loss", T::float32, t, "training loss of the step's batch, before its update");
    trainer_set("/train/accuracy", T::float32, t, "training accuracy of the step's batch (NaN: regression)");
    trainer_set("/train/lr", T::float32, t, "learning rate of the step");
    trainer_set("/train/grad_norm", T::float32, t, "global gradient norm before clipping");
    trainer_set("/norms/attn_fro", T::float32, tlh, "||phi(S)||_F per layer and head, mean over the batch", "‖φ(S)‖_F");
    trainer_set("/norms/jac_fro", T::float32, tlh, "||d phi(S) / dS||_F per layer and head, mean over the batch",
                "‖∂φ(S)/∂S‖_F");
    trainer_set("/eval/step", T::int64, e, "updates done when the test split was evaluated");
    trainer_set("/eval/loss", T::float32, e, "mean test loss");
    trainer_set("/eval/accuracy", T::float32, e, "test accuracy (NaN: regression)");
  });
  return f;
}

const char* kind_name(ResultKind k) {
  switch (k) {
    case K::root_attribute: return "attribute";
    case K::final_metric: return "metric";
    case K::dataset: return "dataset";
  }
  return "?";
}

const char* type_name(ResultType t) {
  switch (t) {
    case T::string: return "string";
    case T::int64: return "int64";
    case T::float32: return "float32";
    case T::float64: return "float64";
  }
  return "?";
}

ResultType type_of(const TaskSeries::Data& d) {
  return std::visit(
      [](const auto& v) {
        using V = typename std::decay_t<decltype(v)>::value_type;
        return std::is_same_v<V, float> ? T::float32 : std::is_same_v<V, double> ? T::float64 : T::int64;
      },
      d);
}

// "/train/loss" -> "/train"
std::string group_of(const std::string& path) {
  return path.substr(0, path.find('/', 1));
}

// "/train/loss" -> "train_loss": its name under aggregate.h5's /trajectories.
std::string trajectory_name(const std::string& path) {
  std::string name = path.substr(1);
  std::replace(name.begin(), name.end(), '/', '_');
  return name;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

}  // namespace

const std::vector<ResultField>& result_schema() {
  static const std::vector<ResultField> fields = declare();
  return fields;
}

const std::vector<std::pair<std::string, std::string>>& result_axes() {
  static const std::vector<std::pair<std::string, std::string>> axes = {
      {"logged_steps", "the logged steps: every log_every, the last one, and a non-finite one"},
      {"evals", "the evaluations of the test split: every eval_every steps and at the end"},
      {"layers", "the model's layers"},
      {"heads", "attention heads per layer"},
      {"classes", "ListOps' 10 labels"},
      {"samples", "the norm probe's draws (samples)"}};
  return axes;
}

const ResultField* find_result_field(ResultKind kind, std::string_view name) {
  for (const ResultField& f : result_schema())
    if (f.kind == kind && f.name == name) return &f;
  return nullptr;
}

bool written_for(const ResultField& field, std::string_view task) {
  return field.tasks.empty() || std::find(field.tasks.begin(), field.tasks.end(), task) != field.tasks.end();
}

std::vector<const ResultField*> result_columns() {
  std::vector<const ResultField*> out;
  for (const ResultField& f : result_schema())
    if (f.kind == K::root_attribute && f.column) out.push_back(&f);
  return out;
}

std::vector<std::string> fitted_metrics() {
  std::vector<std::string> out;
  for (const ResultField& f : result_schema())
    if (f.kind == K::final_metric && f.fitted) out.push_back(f.name);
  return out;
}

std::vector<std::string> trajectory_groups(size_t rank) {
  std::vector<std::string> out;
  for (const ResultField& f : result_schema()) {
    if (f.kind != K::dataset || !f.trajectory || f.shape.size() != rank) continue;
    const std::string g = group_of(f.name);
    if (std::find(out.begin(), out.end(), g) == out.end()) out.push_back(g);
  }
  return out;
}

TaskSeries result_series(std::string_view path, std::vector<uint64_t> shape, TaskSeries::Data data) {
  const ResultField* f = find_result_field(K::dataset, path);
  if (f == nullptr)
    throw std::logic_error(
        "dataset " + std::string(path) +
        " is not declared in the result schema (experiments/result_schema.cpp, or the task's TaskDef)");
  if (type_of(data) != f->type || shape.size() != f->shape.size())
    throw std::logic_error("dataset " + f->name + ": declared " + type_name(f->type) + " [" + join(f->shape, ", ") +
                           "], given " + type_name(type_of(data)) + " of rank " + std::to_string(shape.size()));
  return {f->name, std::move(shape), std::move(data), f->description};
}

EvalMetric result_eval_metric(std::string_view name, std::string_view path) {
  const ResultField* m = find_result_field(K::final_metric, name);
  const ResultField* d = find_result_field(K::dataset, path);
  if (m == nullptr || d == nullptr)
    throw std::logic_error(
        "eval metric " + std::string(name) + " (" + std::string(path) +
        ") is not declared in the result schema (experiments/result_schema.cpp, or the task's TaskDef)");
  return {m->name, d->name, d->description};
}

std::string undeclared_outputs(const TaskOutput& out, std::string_view task) {
  std::vector<std::string> bad;
  if (const TaskDef* t = find_task(task); t && t->open_outputs) {
    // The program's own names: only the form is fixed (/final numbers, 1-D /train series).
    for (const TaskSeries& s : out.series)
      if (s.path.rfind("/train/", 0) != 0 || s.shape.size() != 1) bad.push_back("dataset " + s.path);
    if (bad.empty()) return "";
    return "task " + std::string(task) + " returned " + join(bad, ", ") + ": its datasets are 1-D ones under /train";
  }
  for (const auto& kv : out.final_metrics) {
    const ResultField* f = find_result_field(K::final_metric, kv.first);
    if (f == nullptr || !written_for(*f, task)) bad.push_back("final metric " + kv.first);
  }
  for (const TaskSeries& s : out.series) {
    const ResultField* f = find_result_field(K::dataset, s.path);
    if (f == nullptr || !written_for(*f, task))
      bad.push_back("dataset " + s.path);
    else if (type_of(s.data) != f->type || s.shape.size() != f->shape.size())
      bad.push_back("dataset " + s.path + " (declared " + type_name(f->type) + " [" + join(f->shape, ", ") + "])");
  }
  if (bad.empty()) return "";
  return "task " + std::string(task) + " returned " + join(bad, ", ") +
         ", not declared for it in the result schema (experiments/result_schema.cpp, or the task's TaskDef)";
}

json result_schema_json() {
  json fields = json::array();
  for (const ResultField& f : result_schema()) {
    json j = {{"kind", kind_name(f.kind)},
              {"name", f.name},
              {"type", type_name(f.type)},
              {"shape", f.shape},
              {"writer", f.writer},
              {"tasks", f.tasks},
              {"when", f.when},
              {"description", f.description}};
    if (f.kind == K::root_attribute) j["column"] = f.column;
    if (f.kind == K::final_metric) j["fitted"] = f.fitted;
    if (f.kind == K::dataset) {
      j["trajectory"] = f.trajectory;
      if (f.trajectory) j["trajectory_name"] = trajectory_name(f.name);
    }
    j["label"] = f.label.empty() ? f.name : f.label;
    fields.push_back(std::move(j));
  }
  json axes = json::object();
  for (const auto& [name, what] : result_axes()) axes[name] = what;
  json columns = json::array();
  for (const ResultField* c : result_columns()) columns.push_back(c->name);
  return {{"fields", fields},
          {"axes", axes},
          {"columns", columns},
          {"fitted", fitted_metrics()},
          {"trajectory_groups", {{"1", trajectory_groups(1)}, {"3", trajectory_groups(3)}}}};
}

std::string result_schema_markdown() {
  // '|' would end a table cell: the norms' "||phi(S)||_F" is written \|\|phi(S)\|\|_F.
  auto cell = [](const std::string& s) {
    std::string out;
    for (char c : s) out += c == '|' ? std::string("\\|") : std::string(1, c);
    return out;
  };
  // Appended piece by piece: "`" + std::string&& trips GCC 12's -Wrestrict (a false positive).
  auto code = [](const std::string& s) {
    std::string out(1, '`');
    out += s;
    out += '`';
    return out;
  };
  std::string md =
      "| object | type | shape | written for | by | notes | description |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const ResultField& f : result_schema()) {
    std::string object = f.kind == K::root_attribute ? "`/` attribute "
                         : f.kind == K::final_metric ? "`/final` attribute "
                                                     : "";
    object += code(f.name);
    std::vector<std::string> tasks;
    for (const std::string& t : f.tasks) tasks.push_back(code(t));
    std::string who = tasks.empty() ? "every cell" : join(tasks, ", ");
    if (!f.when.empty()) who += "; " + f.when;
    std::vector<std::string> notes;
    if (f.column) notes.push_back("`/cells` column");
    if (f.fitted) notes.push_back("fitted against prompt_length");
    if (f.trajectory) notes.push_back(code("/trajectories/" + trajectory_name(f.name)));
    if (f.kind == K::final_metric) notes.push_back("summary.csv column");
    std::string shape;
    if (!f.shape.empty()) shape += '[', shape += join(f.shape, ", "), shape += ']';
    for (const std::string& column :
         {object, std::string(type_name(f.type)), shape, cell(who), f.writer, join(notes, "; "), cell(f.description)})
      md += "| ", md += column, md += ' ';
    md += "|\n";
  }
  md += "\nAxes: ";
  std::vector<std::string> axes;
  for (const auto& [name, what] : result_axes()) axes.push_back(code(name) + " " + what);
  md += join(axes, "; ") + ".\n";
  return md;
}

}  // namespace attnsweep
