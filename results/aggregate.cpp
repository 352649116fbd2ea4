#include "results/aggregate.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>

#include <sys/stat.h>

#include "results/atomic_file.h"
#include "results/cell_file.h"
#include "results/h5.h"

namespace attnsweep {
namespace fs = std::filesystem;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Metrics fitted against prompt_length (whichever a cell has as /final attributes).
const std::vector<std::string> kFitMetrics = {"attn_fro", "jac_fro", "limit_sq_error"};
// Groups of a cell file whose 1-D datasets become /trajectories/<group>_<name>.
const std::vector<std::string> kTrajectoryGroups = {"/train", "/eval", "/icl"};

// Shortest text that reads back as the same double ("0.001", "3", "1e-05").
std::string format_number(double v) {
  if (std::isnan(v)) return "";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::to_string(v);
}

// Parameter value as it appears in a fit's group label: strings bare, numbers compact.
std::string label_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return format_number(v.get<double>());
  return v.dump();
}

// Nested config objects become dotted keys ("model.layers"); '/' cannot name a dataset.
void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  for (const auto& [k, v] : j.items()) {
    std::string key = prefix.empty() ? k : prefix + "." + k;
    std::replace(key.begin(), key.end(), '/', '_');
    if (v.is_object() && !v.empty())
      flatten(v, key, out);
    else
      out[key] = v;
  }
}

// Groups of a cell file whose [T, L, H] datasets become /trajectories/<group>_<name>
// [cells, T, L, H] (float32, NaN-padded): the per-layer, per-head norms over training.
const std::vector<std::string> kTrajectoryGroups3 = {"/norms"};

struct TrajectorySource {
  std::string name;             // "train_loss", "norms_attn_fro"
  std::string path;             // "/train/loss"
  std::vector<uint64_t> shape;  // [T] or [T, L, H]
};

// What pass 1 keeps of one readable cell file: its summary row, not its datasets.
struct Row {
  std::string file;  // runs/NAME.h5 relative to DIR
  CellSummary summary;
  std::map<std::string, json> params;
  std::vector<TrajectorySource> trajectories;
  int64_t size = 0, mtime_ns = 0;  // of the file when read (the index's key)
  int64_t old_row = -1;            // row of the previous aggregate.h5 it is copied from, or -1
};

struct TrajectoryInfo {
  std::vector<uint64_t> shape;  // the largest extent of each axis over cells
  std::string description;
};

void merge_shape(std::vector<uint64_t>& into, const std::vector<uint64_t>& shape) {
  if (into.empty()) into.assign(shape.size(), 0);
  for (size_t i = 0; i < shape.size() && i < into.size(); ++i) into[i] = std::max(into[i], shape[i]);
}

// Numeric datasets under `group` (recursively) of the given rank.
void find_trajectories(const h5::Group& group, size_t rank, std::vector<TrajectorySource>& out,
                       std::map<std::string, TrajectoryInfo>& info) {
  for (const std::string& child : group.children()) {
    if (group.is_group(child)) {
      find_trajectories(group.open_group(child), rank, out, info);
    } else if (group.is_dataset(child)) {
      h5::Dataset d = group.open_dataset(child);
      auto shape = d.shape();
      if (shape.size() != rank || (d.kind() != h5::Kind::Float && d.kind() != h5::Kind::Integer)) continue;
      std::string name = d.path().substr(1);
      std::replace(name.begin(), name.end(), '/', '_');
      out.push_back({name, d.path(), shape});
      TrajectoryInfo& t = info[name];
      merge_shape(t.shape, shape);
      if (t.description.empty() && d.has_attribute("description")) {
        auto a = d.attribute("description");
        if (a.kind() == h5::Kind::String) t.description = a.read_string();
      }
    }
  }
}

// ---- the index of the previous aggregate (/index in aggregate.h5) ---------------------
// One entry per row: the file's name, size and mtime, and the row's summary as JSON, so
// that an unchanged file is neither reopened nor reread: its row and trajectories are
// copied from the previous aggregate.h5.

constexpr int64_t kIndexFormat = 1;

json row_to_json(const Row& r, const std::map<std::string, TrajectoryInfo>& info) {
  json metrics = json::object();
  for (const auto& [k, v] : r.summary.final_metrics) metrics[k] = std::isfinite(v) ? json(v) : json(nullptr);
  json traj = json::array();
  for (const TrajectorySource& t : r.trajectories) {
    auto it = info.find(t.name);
    traj.push_back({t.name, t.path, t.shape, it == info.end() ? std::string() : it->second.description});
  }
  return {{"cell_id", r.summary.cell_id},   {"config", r.summary.config},
          {"status", r.summary.status},     {"diverged_at_step", r.summary.diverged_at_step},
          {"device", r.summary.device},     {"wall_seconds", r.summary.wall_seconds},
          {"final", metrics},               {"traj", traj}};
}

struct IndexEntry {
  int64_t size = 0, mtime_ns = 0, row = 0;
  std::string json_text;
};

// The previous aggregate's index; empty when there is none or it cannot be read.
std::map<std::string, IndexEntry> read_index(const std::string& path) {
  std::map<std::string, IndexEntry> out;
  std::error_code ec;
  if (!fs::exists(path, ec)) return out;
  try {
    h5::File f = h5::File::open_read(path);
    if (!f.is_group("/index")) return out;
    h5::Group g = f.open_group("/index");
    if (!g.has_attribute("format") || g.attribute_int64("format") != kIndexFormat) return out;
    auto files = g.open_dataset("file").read_strings();
    auto sizes = g.open_dataset("size").read<int64_t>();
    auto mtimes = g.open_dataset("mtime_ns").read<int64_t>();
    auto rows = g.open_dataset("row").read_strings();
    if (sizes.size() != files.size() || mtimes.size() != files.size() || rows.size() != files.size()) return {};
    for (size_t i = 0; i < files.size(); ++i)
      out[files[i]] = {sizes[i], mtimes[i], static_cast<int64_t>(i), std::move(rows[i])};
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

// Restores a row from its index entry; false when the entry does not parse.
bool row_from_index(const IndexEntry& e, Row& row, std::map<std::string, TrajectoryInfo>& info) {
  try {
    json j = json::parse(e.json_text);
    CellSummary& s = row.summary;
    s.cell_id = j.at("cell_id").get<std::string>();
    s.config = j.at("config");
    s.status = j.at("status").get<std::string>();
    s.diverged_at_step = j.at("diverged_at_step").get<int64_t>();
    s.device = j.at("device").get<std::string>();
    s.wall_seconds = j.at("wall_seconds").get<double>();
    for (const auto& [k, v] : j.at("final").items()) s.final_metrics[k] = v.is_null() ? kNaN : v.get<double>();
    std::map<std::string, TrajectoryInfo> found;
    for (const json& t : j.at("traj")) {
      TrajectorySource src{t.at(0).get<std::string>(), t.at(1).get<std::string>(),
                           t.at(2).get<std::vector<uint64_t>>()};
      TrajectoryInfo& ti = found[src.name];
      merge_shape(ti.shape, src.shape);
      ti.description = t.at(3).get<std::string>();
      row.trajectories.push_back(std::move(src));
    }
    for (auto& [k, t] : found) {
      TrajectoryInfo& all = info[k];
      if (!all.shape.empty() && all.shape.size() != t.shape.size()) return false;
      merge_shape(all.shape, t.shape);
      if (all.description.empty()) all.description = t.description;
    }
  } catch (const std::exception&) {
    return false;
  }
  row.size = e.size;
  row.mtime_ns = e.mtime_ns;
  row.old_row = e.row;
  return true;
}

void write_index(h5::File& f, const std::vector<Row>& rows, const std::map<std::string, TrajectoryInfo>& info) {
  h5::Group g = f.require_group("/index");
  g.set_attribute_int64("format", kIndexFormat);
  std::vector<std::string> files, texts;
  std::vector<int64_t> sizes, mtimes;
  for (const Row& r : rows) {
    files.push_back(r.file.substr(5));  // without "runs/"
    sizes.push_back(r.size);
    mtimes.push_back(r.mtime_ns);
    texts.push_back(row_to_json(r, info).dump());
  }
  const std::vector<uint64_t> shape{rows.size()};
  g.write_strings("file", files, "result file name under runs/, one per /cells row");
  g.write_dataset<int64_t>("size", shape, sizes, "file size in bytes when aggregated");
  g.write_dataset<int64_t>("mtime_ns", shape, mtimes, "file modification time (ns since the epoch) when aggregated");
  g.write_strings("row", texts, "the row's summary and trajectory shapes as JSON (reused while the file is unchanged)");
}

// One /cells column (and summary.csv column).
struct Column {
  enum Type { Int, Float, String } type = Float;
  std::string name, description;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  std::string csv(size_t i) const {
    switch (type) {
      case Int: return std::to_string(ints[i]);
      case Float: return format_number(floats[i]);
      case String: return strings[i];
    }
    return {};
  }
};

Column string_column(std::string name, std::string description, const std::vector<std::string>& values) {
  Column c{Column::String, std::move(name), std::move(description), {}, {}, values};
  return c;
}

// A parameter or metric column from per-row JSON values (null = missing): int64 when
// every row has an integer (or boolean) value, float64 (NaN = missing) when all present
// values are numbers, otherwise strings ("" = missing; non-strings as JSON text).
Column json_column(std::string name, std::string description, const std::vector<json>& values) {
  bool all_present = true, all_numeric = true, all_integer = true;
  for (const json& v : values) {
    if (v.is_null()) {
      all_present = false;
      continue;
    }
    if (!v.is_number() && !v.is_boolean()) all_numeric = false;
    if (!v.is_number_integer() && !v.is_boolean()) all_integer = false;
  }
  Column c;
  c.name = std::move(name);
  c.description = std::move(description);
  if (all_numeric && all_integer && all_present && !values.empty()) {
    c.type = Column::Int;
    for (const json& v : values) c.ints.push_back(v.is_boolean() ? int64_t{v.get<bool>()} : v.get<int64_t>());
  } else if (all_numeric) {
    c.type = Column::Float;
    for (const json& v : values)
      c.floats.push_back(v.is_null() ? kNaN : v.is_boolean() ? double{v.get<bool>() ? 1.0 : 0.0} : v.get<double>());
  } else {
    c.type = Column::String;
    for (const json& v : values) c.strings.push_back(v.is_null() ? "" : v.is_string() ? v.get<std::string>() : v.dump());
  }
  return c;
}

std::vector<Column> build_columns(const std::vector<Row>& rows) {
  std::vector<Column> cols;
  auto pick = [&](auto get) {
    std::vector<std::string> v;
    for (const Row& r : rows) v.push_back(get(r));
    return v;
  };
  cols.push_back(string_column("cell_id", "content hash of the effective config", pick([](const Row& r) { return r.summary.cell_id; })));
  cols.push_back(string_column("status", "complete or diverged", pick([](const Row& r) { return r.summary.status; })));
  cols.push_back(string_column("device", "device the cell ran on", pick([](const Row& r) { return r.summary.device; })));
  Column wall{Column::Float, "wall_seconds", "wall-clock seconds of the cell", {}, {}, {}};
  Column div{Column::Int, "diverged_at_step", "step at which the loss became NaN/Inf, -1 if none", {}, {}, {}};
  for (const Row& r : rows) {
    wall.floats.push_back(r.summary.wall_seconds);
    div.ints.push_back(r.summary.diverged_at_step);
  }
  cols.push_back(std::move(wall));
  cols.push_back(std::move(div));

  std::set<std::string> taken;
  for (const Column& c : cols) taken.insert(c.name);
  std::set<std::string> param_keys, metric_keys;
  for (const Row& r : rows) {
    for (const auto& kv : r.params) param_keys.insert(kv.first);
    for (const auto& kv : r.summary.final_metrics) metric_keys.insert(kv.first);
  }
  for (const std::string& key : param_keys) {
    std::vector<json> values;
    for (const Row& r : rows) {
      auto it = r.params.find(key);
      values.push_back(it == r.params.end() ? json() : it->second);
    }
    std::string name = taken.count(key) ? "config." + key : key;  // never shadow a fixed column
    taken.insert(name);
    cols.push_back(json_column(name, "config parameter " + key, values));
  }
  for (const std::string& key : metric_keys) {
    Column c{Column::Float, taken.count(key) ? "final." + key : key, "final metric (/final attribute " + key + ")", {}, {}, {}};
    taken.insert(c.name);
    for (const Row& r : rows) {
      auto it = r.summary.final_metrics.find(key);
      c.floats.push_back(it == r.summary.final_metrics.end() ? kNaN : it->second);
    }
    cols.push_back(std::move(c));
  }
  return cols;
}

// RFC 4180: quote a field holding a comma, quote or line break; double the quotes.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}

void write_csv(const std::string& path, const std::vector<Column>& cols, size_t rows) {
  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error(tmp + ": cannot create file");
    for (size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << csv_field(cols[c].name);
    out << "\n";
    for (size_t i = 0; i < rows; ++i) {
      for (size_t c = 0; c < cols.size(); ++c) out << (c ? "," : "") << csv_field(cols[c].csv(i));
      out << "\n";
    }
    out.close();
    if (!out) throw std::runtime_error(tmp + ": write failed");
  }
  commit_file(tmp, path);
  guard.release();
}

void write_column(h5::Group& g, const Column& c) {
  switch (c.type) {
    case Column::Int: g.write_dataset<int64_t>(c.name, {c.ints.size()}, c.ints, c.description); break;
    case Column::Float: g.write_dataset<double>(c.name, {c.floats.size()}, c.floats, c.description); break;
    case Column::String: g.write_strings(c.name, c.strings, c.description); break;
  }
}

// Fits of each metric against prompt_length per group of the other parameters.
std::vector<Fit> compute_fits(const std::vector<Row>& rows, const AggregateOptions& opt) {
  std::map<std::pair<std::string, std::string>, std::pair<std::vector<double>, std::vector<double>>> points;
  for (const Row& r : rows) {
    if (r.summary.status != "complete") continue;
    auto n_it = r.params.find("prompt_length");
    if (n_it == r.params.end() || !n_it->second.is_number()) continue;
    const double n = n_it->second.get<double>();
    if (n < static_cast<double>(opt.fit_min_n) || n > static_cast<double>(opt.fit_max_n)) continue;
    std::string group;
    for (const auto& [k, v] : r.params) {
      if (k == "prompt_length" || k == "seed") continue;
      group += (group.empty() ? "" : " ") + k + "=" + label_value(v);
    }
    for (const std::string& metric : kFitMetrics) {
      auto m = r.summary.final_metrics.find(metric);
      if (m == r.summary.final_metrics.end() || !(m->second > 0) || !std::isfinite(m->second)) continue;
      auto& [xs, ys] = points[{group, metric}];
      xs.push_back(n);
      ys.push_back(m->second);
    }
  }
  std::vector<Fit> fits;
  for (const auto& [key, xy] : points) {
    if (std::set<double>(xy.first.begin(), xy.first.end()).size() < 2) continue;
    Fit f = fit_loglog(xy.first, xy.second);
    f.group = key.first;
    f.metric = key.second;
    fits.push_back(std::move(f));
  }
  return fits;
}

void write_fits(h5::File& f, const std::vector<Fit>& fits) {
  h5::Group g = f.require_group("/fits");
  auto strings = [&](auto get) {
    std::vector<std::string> v;
    for (const Fit& x : fits) v.push_back(get(x));
    return v;
  };
  auto doubles = [&](auto get) {
    std::vector<double> v;
    for (const Fit& x : fits) v.push_back(get(x));
    return v;
  };
  auto ints = [&](auto get) {
    std::vector<int64_t> v;
    for (const Fit& x : fits) v.push_back(get(x));
    return v;
  };
  const std::vector<uint64_t> shape{fits.size()};
  g.write_strings("metric", strings([](const Fit& x) { return x.metric; }), "fitted /final metric");
  g.write_strings("group", strings([](const Fit& x) { return x.group; }),
                  "the other config parameters (all but prompt_length and seed), k=v in key order");
  g.write_dataset<double>("slope", shape, doubles([](const Fit& x) { return x.slope; }),
                          "OLS slope of log(metric) on log(prompt_length)");
  g.write_dataset<double>("intercept", shape, doubles([](const Fit& x) { return x.intercept; }),
                          "OLS intercept of log(metric) on log(prompt_length) (natural logs)");
  g.write_dataset<double>("r2", shape, doubles([](const Fit& x) { return x.r2; }), "coefficient of determination");
  g.write_dataset<double>("slope_ci95", shape, doubles([](const Fit& x) { return x.slope_ci95; }),
                          "half-width of the 95% Student-t interval of the slope (NaN below 3 points)");
  g.write_dataset<int64_t>("points", shape, ints([](const Fit& x) { return x.points; }), "cells in the fit");
  g.write_dataset<int64_t>("n_min", shape, ints([](const Fit& x) { return x.n_min; }), "smallest prompt_length used");
  g.write_dataset<int64_t>("n_max", shape, ints([](const Fit& x) { return x.n_max; }), "largest prompt_length used");
}

// Regularised incomplete beta I_x(a, b) by its continued fraction (Numerical Recipes 6.4).
double incomplete_beta(double a, double b, double x) {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  auto cf = [](double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1, d = 1 - (a + b) * x / (a + 1);
    d = 1 / (std::abs(d) < tiny ? tiny : d);
    double h = d;
    for (int m = 1; m <= 300; ++m) {
      double aa = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m));
      d = 1 + aa * d;
      c = 1 + aa / c;
      d = 1 / (std::abs(d) < tiny ? tiny : d);
      c = std::abs(c) < tiny ? tiny : c;
      h *= d * c;
      aa = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1));
      d = 1 + aa * d;
      c = 1 + aa / c;
      d = 1 / (std::abs(d) < tiny ? tiny : d);
      c = std::abs(c) < tiny ? tiny : c;
      double del = d * c;
      h *= del;
      if (std::abs(del - 1) < 1e-15) break;
    }
    return h;
  };
  const double front =
      std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) + a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * cf(a, b, x) / a;
  return 1 - front * cf(b, a, 1 - x) / b;
}

}  // namespace

double student_t_quantile(double p, double dof) {
  if (!(p > 0 && p < 1) || !(dof > 0)) return kNaN;
  if (p < 0.5) return -student_t_quantile(1 - p, dof);
  // P(T > t) = I_{dof/(dof+t²)}(dof/2, 1/2) / 2; bisect on t (monotone).
  const double tail = 1 - p;
  double lo = 0, hi = 1;
  while (incomplete_beta(dof / 2, 0.5, dof / (dof + hi * hi)) / 2 > tail) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-14 * hi; ++i) {
    double mid = (lo + hi) / 2;
    (incomplete_beta(dof / 2, 0.5, dof / (dof + mid * mid)) / 2 > tail ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

Fit fit_loglog(const std::vector<double>& x, const std::vector<double>& y) {
  Fit f;
  f.slope = f.intercept = f.r2 = f.slope_ci95 = kNaN;
  std::vector<double> lx, ly;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!(x[i] > 0 && y[i] > 0) || !std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    lx.push_back(std::log(x[i]));
    ly.push_back(std::log(y[i]));
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  const size_t n = lx.size();
  f.points = static_cast<int64_t>(n);
  if (n == 0) return f;
  f.n_min = std::llround(xmin);
  f.n_max = std::llround(xmax);
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += lx[i];
    my += ly[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (lx[i] - mx) * (lx[i] - mx);
    sxy += (lx[i] - mx) * (ly[i] - my);
    syy += (ly[i] - my) * (ly[i] - my);
  }
  if (n < 2 || !(sxx > 0)) return f;  // one distinct x: no line
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss_res = 0;
  for (size_t i = 0; i < n; ++i) {
    double r = ly[i] - (f.intercept + f.slope * lx[i]);
    ss_res += r * r;
  }
  f.r2 = syy > 0 ? 1 - ss_res / syy : kNaN;
  if (n >= 3) {
    const double dof = static_cast<double>(n - 2);
    f.slope_ci95 = student_t_quantile(0.975, dof) * std::sqrt(ss_res / dof / sxx);
  }
  return f;
}

namespace {

// File size and modification time in ns (the index's key).
bool file_stamp(const std::string& path, int64_t& size, int64_t& mtime_ns) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  size = static_cast<int64_t>(st.st_size);
  mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return true;
}

// "FILE: reason" -> "reason" for messages that already name the file.
std::string strip_path(std::string msg, const std::string& path) {
  if (msg.rfind(path, 0) == 0) msg = msg.substr(path.size() + (msg.compare(path.size(), 2, ": ") == 0 ? 2 : 1));
  return msg;
}

}  // namespace

AggregateResult aggregate_dir(const std::string& dir, const AggregateOptions& opt) {
  const fs::path root(dir), runs = root / "runs";
  std::error_code ec;
  if (!fs::is_directory(runs, ec)) throw std::runtime_error(dir + ": no runs/ folder (is this a results directory?)");

  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(runs, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) continue;  // a writer's temporary
    if (e.path().extension() == ".h5") names.push_back(name);
  }
  if (ec) throw std::runtime_error(runs.string() + ": cannot list (" + ec.message() + ")");
  std::sort(names.begin(), names.end());

  const std::string out_path = (root / "aggregate.h5").string();
  const std::map<std::string, IndexEntry> index =
      opt.reuse_previous ? read_index(out_path) : std::map<std::string, IndexEntry>{};

  AggregateResult result;
  // Pass 1: summaries, parameters and trajectory shapes; no datasets are read. A file
  // whose size and mtime match the previous aggregate's index is not opened at all.
  std::vector<Row> rows;
  std::map<std::string, TrajectoryInfo> trajectories;
  for (const std::string& name : names) {
    const std::string rel = "runs/" + name, path = (runs / name).string();
    const std::string id = fs::path(name).stem().string();  // runs/<cell_id>.h5
    int64_t size = 0, mtime = 0;
    const bool stamped = file_stamp(path, size, mtime);
    if (stamped) {
      auto it = index.find(name);
      if (it != index.end() && it->second.size == size && it->second.mtime_ns == mtime) {
        Row row;
        row.file = rel;
        std::map<std::string, TrajectoryInfo> merged = trajectories;
        if (row_from_index(it->second, row, merged) && row.summary.cell_id == id) {
          trajectories = std::move(merged);
          flatten(row.summary.config, "", row.params);
          rows.push_back(std::move(row));
          ++result.reused;
          continue;
        }
      }
    }
    std::string why;
    auto summary = read_valid_cell_summary(path, id, &why);
    if (!summary) {
      result.skipped.push_back(rel + ": " + why);
      continue;
    }
    Row row{rel, std::move(*summary), {}, {}, size, mtime, -1};
    flatten(row.summary.config, "", row.params);
    try {
      h5::File f = h5::File::open_read(path);
      std::map<std::string, TrajectoryInfo> found;
      for (const std::string& g : kTrajectoryGroups)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 1, row.trajectories, found);
      for (const std::string& g : kTrajectoryGroups3)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 3, row.trajectories, found);
      for (const auto& [k, t] : found) {
        TrajectoryInfo& all = trajectories[k];
        merge_shape(all.shape, t.shape);
        if (all.description.empty()) all.description = t.description;
      }
    } catch (const std::exception& e) {
      result.skipped.push_back(rel + ": " + strip_path(e.what(), path));
      continue;
    }
    if (!stamped) row.size = row.mtime_ns = -1;  // never matches: reread next time
    rows.push_back(std::move(row));
    ++result.reread;
  }
  result.cells = static_cast<int64_t>(rows.size());
  const uint64_t cells = rows.size();

  std::vector<Column> cols = build_columns(rows);
  for (const Column& c : cols) result.columns.push_back(c.name);
  result.fits = compute_fits(rows, opt);

  const std::string tmp = temp_path_for(out_path);
  TempFileGuard guard(tmp);
  {
    h5::File f = h5::File::create(tmp);
    f.set_attribute_string("attnsweep_version", ATTNSWEEP_VERSION);
    f.set_attribute_int64("cells", result.cells);
    {
      h5::Group g = f.require_group("/cells");
      for (const Column& c : cols) write_column(g, c);
    }
    // Pass 2: one trajectory row at a time into NaN-filled [cells, T] (float64) and
    // [cells, T, L, H] (float32) datasets (unwritten chunks read back as NaN); a row of
    // an unchanged file is copied from the previous aggregate, others are read from the
    // cell file, each file opened once. Memory: one row per dataset at a time.
    {
      std::optional<h5::File> previous;
      std::map<std::string, h5::Dataset> previous_sets;
      bool any_old = false;
      for (const Row& r : rows) any_old |= r.old_row >= 0 && !r.trajectories.empty();
      if (any_old) previous.emplace(h5::File::open_read(out_path));

      h5::Group g = f.require_group("/trajectories");
      std::map<std::string, h5::Dataset> out;
      for (const auto& [name, t] : trajectories) {
        std::vector<uint64_t> shape{cells};
        shape.insert(shape.end(), t.shape.begin(), t.shape.end());
        const std::string axes = t.shape.size() == 1 ? "[cells, T]" : "[cells, T, L, H]";
        std::string desc = (t.description.empty() ? name : t.description) + " " + axes + ", NaN-padded";
        if (t.shape.size() == 1)
          out.emplace(name, g.create_filled<double>(name, shape, kNaN, desc));
        else
          out.emplace(name, g.create_filled<float>(name, shape, std::numeric_limits<float>::quiet_NaN(), desc));
      }
      auto copy_row = [&](h5::Dataset& dst, const TrajectorySource& src, uint64_t i, auto values) {
        std::vector<uint64_t> offset(src.shape.size() + 1, 0), count{1};
        offset[0] = i;
        count.insert(count.end(), src.shape.begin(), src.shape.end());
        dst.write_block(offset, count, std::span(std::as_const(values)));
      };
      for (uint64_t i = 0; i < cells; ++i) {
        const Row& row = rows[i];
        if (row.trajectories.empty()) continue;
        try {
          std::optional<h5::File> cell;
          if (row.old_row < 0) cell.emplace(h5::File::open_read((root / row.file).string()));
          for (const TrajectorySource& src : row.trajectories) {
            h5::Dataset& dst = out.at(src.name);
            if (dst.shape().size() != src.shape.size() + 1) continue;  // rank differs from the other cells'
            if (row.old_row >= 0) {
              auto it = previous_sets.find(src.name);
              if (it == previous_sets.end())
                it = previous_sets.emplace(src.name, previous->open_dataset("/trajectories/" + src.name)).first;
              std::vector<uint64_t> offset(src.shape.size() + 1, 0), count{1};
              offset[0] = static_cast<uint64_t>(row.old_row);
              count.insert(count.end(), src.shape.begin(), src.shape.end());
              if (src.shape.size() == 1)
                copy_row(dst, src, i, it->second.read_block<double>(offset, count));
              else
                copy_row(dst, src, i, it->second.read_block<float>(offset, count));
            } else if (src.shape.size() == 1) {
              copy_row(dst, src, i, cell->open_dataset(src.path).read<double>());
            } else {
              copy_row(dst, src, i, cell->open_dataset(src.path).read<float>());
            }
          }
        } catch (const h5::Error& e) {
          if (std::string(e.what()).find(tmp) != std::string::npos) throw;  // our output failed
          result.skipped.push_back(row.file + ": trajectories not read (row kept): " + e.what());
        }
      }
    }
    write_fits(f, result.fits);
    f.write_strings("/skipped", result.skipped, "runs/NAME: why a result file was left out");
    write_index(f, rows, trajectories);
    f.close();
  }
  commit_file(tmp, out_path);
  guard.release();

  write_csv((root / "summary.csv").string(), cols, rows.size());
  return result;
}

}  // namespace attnsweep
