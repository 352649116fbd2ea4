// export_tensorboard (results/export_tensorboard.h): pass 1 reads every result file's
// summary (the test aggregate makes: checksum, root attributes, /final), so that each
// key's HParams type is known over the whole grid before any session is written; pass 2
// reads each usable file's series and writes its event file; last, OUT's experiment.
#include "results/export_tensorboard.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include "base/atomic_file.h"
#include "experiments/result_schema.h"
#include "results/aggregate_rows.h"
#include "results/cell_file.h"
#include "results/h5.h"
#include "results/run_manifest.h"
#include "results/table.h"
#include "results/tfevents.h"

namespace attnsweep {
namespace {

namespace fs = std::filesystem;
using tfevents::HParamType;
using tfevents::HParamValue;
using tfevents::Proto;

// A result file that pass 1 found usable.
struct Cell {
  std::string rel, path;  // runs/NAME.h5 (for messages) and its path
  CellSummary summary;
  std::map<std::string, json> params;  // the flattened config: the HParams
};

// One scalar of a cell: tags[tag] = value at step.
struct Point {
  int64_t step;
  uint32_t tag;
  float value;
};

// "2026-11-29T16:02:11Z" (the result files' times, base/utc_time.h) as seconds since the
// epoch; nullopt for anything else.
std::optional<double> parse_utc(const std::string& s) {
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%SZ");
  if (in.fail()) return std::nullopt;
  return static_cast<double>(::timegm(&tm));
}

// The dataset whose rows are the steps of `path`'s rows: the schema's `step` dataset on
// the first axis the schema declares for `path` (/norms/attn_fro: logged_steps, so
// /train/step; /icl/limit_sq_error: evals, so /eval/step). A dataset the schema does not
// name (a command cell's own /train series) is on its group's steps.
std::string steps_dataset(const std::string& path) {
  const ResultField* f = find_result_field(ResultKind::dataset, path);
  if (f == nullptr || f->shape.empty()) return path.substr(0, path.find('/', 1)) + "/step";
  for (const ResultField& s : result_schema())
    if (s.kind == ResultKind::dataset && s.shape == std::vector<std::string>{f->shape[0]} && s.name.size() > 5 &&
        s.name.compare(s.name.size() - 5, 5, "/step") == 0)
      return s.name;
  return "";
}

// A key's HParams type over every cell that has it: Bool or Float64 when every value is
// one, else String (a column that mixes scale names and numbers).
HParamType hparam_type(const std::vector<const json*>& values) {
  const bool all_bool = std::all_of(values.begin(), values.end(), [](const json* v) { return v->is_boolean(); });
  const bool all_number = std::all_of(values.begin(), values.end(), [](const json* v) { return v->is_number(); });
  return all_bool ? HParamType::Bool : all_number ? HParamType::Float64 : HParamType::String;
}

HParamValue hparam_value(const json& v, HParamType type) {
  switch (type) {
    case HParamType::Bool: return v.get<bool>();
    case HParamType::Float64: return v.get<double>();
    case HParamType::String: break;
  }
  return label_value(v);  // as summary.csv writes it
}

// "FILE: reason" -> "reason" for messages that already name the file.
std::string without_path(std::string msg, const std::string& path) {
  if (msg.rfind(path, 0) == 0) msg = msg.substr(path.size() + (msg.compare(path.size(), 2, ": ") == 0 ? 2 : 1));
  return msg;
}

// Pass 1: the usable cells, each file's summary read the way aggregate reads it.
std::vector<Cell> read_cells(const std::string& dir, const std::vector<std::string>& names, TensorboardExport& r) {
  std::vector<Cell> cells;
  for (const std::string& name : names) {
    Cell c{"runs/" + name, (fs::path(dir) / "runs" / name).string(), {}, {}};
    try {
      if (std::string damaged = cell_file_damage(c.path); !damaged.empty()) {
        r.skipped.push_back(c.rel + ": " + damaged);
        continue;
      }
      h5::File f = h5::File::open_read_in_memory(c.path);
      std::string why;
      auto summary = read_valid_cell_summary(f, fs::path(name).stem().string(), &why);
      if (!summary) {
        r.skipped.push_back(c.rel + ": " + why);
        continue;
      }
      c.summary = std::move(*summary);
    } catch (const std::exception& e) {
      r.skipped.push_back(c.rel + ": " + without_path(e.what(), c.path));
      continue;
    }
    aggregation::flatten(c.summary.config, "", c.params);
    cells.push_back(std::move(c));
  }
  return cells;
}

// Every series of the result schema's trajectory groups as scalars at their steps: a 1-D
// dataset under its path ("train/loss"), a [T, L, H] one per layer and head
// ("norms/attn_fro/layer0/head1"). A series whose steps are missing or of another length
// is left out with a warning.
void read_scalars(const h5::File& f, const std::string& rel, std::vector<std::string>& tags, std::vector<Point>& points,
                  std::vector<std::string>& warnings) {
  std::vector<aggregation::TrajectorySource> sources;
  std::map<std::string, aggregation::TrajectoryInfo> info;
  for (size_t rank : {size_t{1}, size_t{3}})
    for (const std::string& g : trajectory_groups(rank))
      if (f.is_group(g)) aggregation::find_trajectories(f.open_group(g), rank, sources, info, {});
  std::map<std::string, std::vector<int64_t>> steps_of;
  for (const aggregation::TrajectorySource& s : sources) {
    const std::string steps_path = steps_dataset(s.path);
    if (steps_path.empty() || steps_path == s.path) continue;  // a step dataset itself, or one without steps
    if (!steps_of.count(steps_path)) {
      if (!f.is_dataset(steps_path)) {
        warnings.push_back(rel + ": " + s.path + ": left out: no " + steps_path + " to give its steps");
        continue;
      }
      steps_of[steps_path] = f.open_dataset(steps_path).read<int64_t>();
    }
    const std::vector<int64_t>& steps = steps_of[steps_path];
    if (s.shape[0] != steps.size()) {
      warnings.push_back(rel + ": " + s.path + ": left out: " + std::to_string(s.shape[0]) + " rows, expected " +
                         std::to_string(steps.size()) + " (the length of " + steps_path + ")");
      continue;
    }
    const std::vector<double> values = f.open_dataset(s.path).read<double>();
    const uint64_t per_row = s.shape.size() == 3 ? s.shape[1] * s.shape[2] : 1;
    const std::string base = s.path.substr(1);
    for (uint64_t k = 0; k < per_row; ++k) {
      const auto tag = static_cast<uint32_t>(tags.size());
      tags.push_back(s.shape.size() == 3
                         ? base + "/layer" + std::to_string(k / s.shape[2]) + "/head" + std::to_string(k % s.shape[2])
                         : base);
      for (uint64_t t = 0; t < steps.size(); ++t)
        points.push_back({steps[t], tag, static_cast<float>(values[t * per_row + k])});
    }
  }
  // One event per step, in step order (each tag's points keep their order within a step).
  std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.step < b.step; });
}

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || h[0] == '\0') return "localhost";
  return h;
}

// `bytes` as the event file OUT/FOLDER/events.out.tfevents.<time>.<host>: written to a
// temporary whose name TensorBoard does not read ("tfevents" marks its files), synced,
// renamed; then the event files an earlier export left in the folder are removed, so a
// second export replaces the first instead of doubling every point.
void write_event_file(const fs::path& folder, double time, const std::string& bytes) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (ec) throw ExportOutputError(folder.string() + ": cannot create the folder (" + ec.message() + ")");
  const std::string name = "events.out.tfevents." + std::to_string(static_cast<int64_t>(time)) + "." + host_name();
  const std::string path = (folder / name).string(),
                    tmp = (folder / "attnsweep-export").string() + ".tmp." + std::to_string(::getpid());
  TempFileGuard guard(tmp);
  {
    std::ofstream o(tmp, std::ios::binary | std::ios::trunc);
    o.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    o.close();
    if (!o) throw ExportOutputError(tmp + ": cannot write (" + std::strerror(errno) + ")");
  }
  try {
    commit_file(tmp, path);
  } catch (const std::exception& e) {
    throw ExportOutputError(e.what());
  }
  guard.release();
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    const std::string n = e.path().filename().string();
    if (n != name && n.rfind("events.out.tfevents.", 0) == 0 && e.is_regular_file(ec)) fs::remove(e.path(), ec);
  }
}

// Pass 2 for one cell: its event file. Returns when the cell started, or nothing, with a
// skipped message, when the file cannot be read now.
std::optional<double> export_cell(const Cell& c, const std::map<std::string, HParamType>& types, const fs::path& out,
                                  TensorboardExport& r) {
  std::vector<std::string> tags, warnings;
  std::vector<Point> points;
  std::optional<double> started, finished;
  try {
    h5::File f = h5::File::open_read_in_memory(c.path);
    if (f.has_attribute("started")) started = parse_utc(f.attribute_string("started"));
    if (f.has_attribute("finished")) finished = parse_utc(f.attribute_string("finished"));
    read_scalars(f, c.rel, tags, points, warnings);
  } catch (const std::exception& e) {
    r.skipped.push_back(c.rel + ": " + without_path(e.what(), c.path));
    return std::nullopt;
  }
  // The result file has no time per step: its steps are spread evenly over the cell's
  // wall time, from `started` to `finished`.
  const double t0 = started ? *started : finished ? *finished - c.summary.wall_seconds : 0.0;
  const double t1 = std::max(t0, finished ? *finished : t0 + c.summary.wall_seconds);
  const int64_t last = points.empty() ? 0 : std::max<int64_t>(0, points.back().step);
  auto wall = [&](int64_t step) { return last > 0 ? t0 + (t1 - t0) * static_cast<double>(step) / last : t1; };

  std::map<std::string, HParamValue> hparams;
  for (const auto& [k, v] : c.params)
    if (!v.is_null()) hparams[k] = hparam_value(v, types.at(k));
  std::string bytes = tfevents::file_version_record(t0);
  bytes += tfevents::event_record(t0, 0, {tfevents::hparams_session_start(hparams, fs::absolute(c.path).string(), t0)});
  for (size_t i = 0; i < points.size();) {
    std::vector<Proto> values;
    const int64_t step = points[i].step;
    for (; i < points.size() && points[i].step == step; ++i)
      values.push_back(tfevents::scalar_value(tags[points[i].tag], points[i].value));
    bytes += tfevents::event_record(wall(step), step, values);
  }
  std::vector<Proto> final_values;
  for (const auto& [m, v] : c.summary.final_metrics)
    final_values.push_back(tfevents::scalar_value("final/" + m, static_cast<float>(v)));
  final_values.push_back(tfevents::hparams_session_end(
      c.summary.status == CellStatus::complete ? tfevents::SessionStatus::Success : tfevents::SessionStatus::Failure,
      t1));
  bytes += tfevents::event_record(t1, last, final_values);

  const std::string task =
      c.params.count("task") && c.params.at("task").is_string() ? c.params.at("task").get<std::string>() : "";
  write_event_file(out / tensorboard_run_name(activation_label(c.params), task, c.summary.cell_id), t0, bytes);
  ++r.cells;
  r.series += static_cast<int64_t>(tags.size() + c.summary.final_metrics.size());
  r.points += static_cast<int64_t>(points.size() + c.summary.final_metrics.size());
  r.warnings.insert(r.warnings.end(), warnings.begin(), warnings.end());
  return t0;
}

}  // namespace

std::string tensorboard_run_name(const std::string& label, const std::string& task, const std::string& cell_id) {
  // The characters of the registry's labels (results/table.h activation_label) in ASCII.
  static const std::vector<std::pair<std::string, std::string>> kAscii = {
      {"⁰", "0"}, {"¹", "1"}, {"²", "2"}, {"³", "3"}, {"⁴", "4"}, {"⁵", "5"},   {"⁶", "6"},
      {"⁷", "7"}, {"⁸", "8"}, {"⁹", "9"}, {"ᵖ", "p"}, {"⁻", "-"}, {"√", "sqrt"}};
  const std::string& text = label.empty() ? (task.empty() ? std::string("cell") : task) : label;
  std::string name;
  for (size_t i = 0; i < text.size();) {
    const auto m = std::find_if(kAscii.begin(), kAscii.end(),
                                [&](const auto& p) { return text.compare(i, p.first.size(), p.first) == 0; });
    if (m != kAscii.end()) {
      name += m->second;
      i += m->first.size();
      continue;
    }
    const unsigned char ch = static_cast<unsigned char>(text[i++]);
    const bool safe = std::isalnum(ch) || std::strchr("._=+-", ch) != nullptr;
    if (safe && ch < 0x80)
      name += static_cast<char>(ch);
    else if (name.empty() || name.back() != '_')
      name += '_';  // a '/', a space, or a byte of a character not in the table
  }
  return name + "__" + cell_id;
}

TensorboardExport export_tensorboard(const std::string& dir, const std::string& out) {
  TensorboardExport r;
  const std::vector<std::string> names =
      result_file_names(dir, &r.not_in_grid);  // a DIR without runs/ first: nothing is made
  {
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out))
      throw ExportOutputError(out + ": cannot create the folder (" + (ec ? ec.message() : "not a directory") + ")");
    if (::access(out.c_str(), W_OK) != 0)
      throw ExportOutputError(out + ": not writable (" + std::strerror(errno) + ")");
  }
  const std::vector<Cell> cells = read_cells(dir, names, r);
  // Each key's type over every cell that has it.
  std::map<std::string, std::vector<const json*>> values_of;
  for (const Cell& c : cells)
    for (const auto& [k, v] : c.params)
      if (!v.is_null()) values_of[k].push_back(&v);
  std::map<std::string, HParamType> types;
  for (const auto& [k, vs] : values_of) types[k] = hparam_type(vs);

  // The experiment: the keys and metrics of the cells written, created when the first started.
  std::set<std::string> metrics;
  std::map<std::string, std::set<HParamValue>> domains;
  std::map<std::string, int64_t> cells_with;
  std::optional<double> created;
  for (const Cell& c : cells) {
    const std::optional<double> start = export_cell(c, types, out, r);
    if (!start) continue;
    created = created ? std::min(*created, *start) : *start;
    for (const auto& [m, v] : c.summary.final_metrics) metrics.insert("final/" + m);
    for (const auto& [k, v] : c.params) {
      if (v.is_null()) continue;
      domains[k].insert(hparam_value(v, types.at(k)));
      ++cells_with[k];
    }
  }
  // A key differs when it takes two values, or some cells lack it (degree beside softmax).
  std::vector<tfevents::HParamInfo> infos;
  for (const auto& [k, d] : domains)
    infos.push_back({k, types.at(k), {d.begin(), d.end()}, d.size() > 1 || cells_with[k] < r.cells});
  const double t = created.value_or(static_cast<double>(std::time(nullptr)));
  std::string bytes = tfevents::file_version_record(t);
  bytes += tfevents::event_record(t, 0, {tfevents::hparams_experiment(infos, {metrics.begin(), metrics.end()}, t)});
  write_event_file(out, t, bytes);
  return r;
}

}  // namespace attnsweep
