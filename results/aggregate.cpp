#include "results/aggregate.h"

#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <stdexcept>
#include <utility>
#include <variant>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "experiments/result_schema.h"
#include "results/best_scale.h"
#include "results/cell_file.h"
#include "results/h5.h"
#include "results/paired.h"
#include "results/table.h"
#include "worker/atomic_file.h"

namespace attnsweep {
namespace fs = std::filesystem;
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What a cell file holds is declared in experiments/result_schema.cpp: the fixed
// columns, the metrics fitted against prompt_length (whichever a cell has as /final
// attributes: the norms of paper A, in-context regression's distance to the limit and
// test risk against the context length L of paper B) and the trajectory groups.
const std::vector<std::string> kFitMetrics = fitted_metrics();

// Groups of a cell file whose 1-D datasets become /trajectories/<group>_<name>
// (/train, /eval, /icl).
const std::vector<std::string> kTrajectoryGroups = trajectory_groups(1);

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
const std::vector<std::string> kTrajectoryGroups3 = trajectory_groups(3);

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
// `known`: trajectories whose description is already known (not read again).
void find_trajectories(const h5::Group& group, size_t rank, std::vector<TrajectorySource>& out,
                       std::map<std::string, TrajectoryInfo>& info,
                       const std::map<std::string, TrajectoryInfo>& known) {
  for (const std::string& child : group.children()) {
    auto member = group.open_member(child);  // opened once: this walk is most of pass 1
    if (auto* g = std::get_if<h5::Group>(&member)) {
      find_trajectories(*g, rank, out, info, known);
    } else if (auto* ds = std::get_if<h5::Dataset>(&member)) {
      const h5::Dataset& d = *ds;
      auto shape = d.shape();
      if (shape.size() != rank || (d.kind() != h5::Kind::Float && d.kind() != h5::Kind::Integer)) continue;
      std::string name = d.path().substr(1);
      std::replace(name.begin(), name.end(), '/', '_');
      out.push_back({name, d.path(), shape});
      TrajectoryInfo& t = info[name];
      merge_shape(t.shape, shape);
      auto k = known.find(name);
      if (k != known.end() && !k->second.description.empty()) t.description = k->second.description;
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

// The summary's JSON (worker/cell_result.h) and "traj": [[name, path, shape, description]].
json row_to_json(const Row& r, const std::map<std::string, TrajectoryInfo>& info) {
  json traj = json::array();
  for (const TrajectorySource& t : r.trajectories) {
    auto it = info.find(t.name);
    traj.push_back({t.name, t.path, t.shape, it == info.end() ? std::string() : it->second.description});
  }
  json j = r.summary;
  j["traj"] = std::move(traj);
  return j;
}

struct IndexEntry {
  int64_t size = 0, mtime_ns = 0, row = 0;
  std::string json_text;
};

// What the previous aggregate.h5 holds: its index (empty when there is none or it
// cannot be read) and what an unchanged rerun compares against to write nothing.
struct Previous {
  std::map<std::string, IndexEntry> index;
  bool complete = false;  // everything below was read
  int64_t cells = -1;
  std::string version;
  std::vector<std::string> skipped;
  std::vector<Fit> fits;
  std::map<std::string, std::vector<uint64_t>> trajectory_shapes;  // [cells, ...]
};

std::vector<Fit> read_fits(const h5::File& f) {
  std::vector<Fit> fits;
  if (!f.is_group("/fits")) return fits;
  h5::Group g = f.open_group("/fits");
  auto metric = g.open_dataset("metric").read_strings(), group = g.open_dataset("group").read_strings();
  auto slope = g.open_dataset("slope").read<double>(), intercept = g.open_dataset("intercept").read<double>();
  auto r2 = g.open_dataset("r2").read<double>(), ci = g.open_dataset("slope_ci95").read<double>();
  auto points = g.open_dataset("points").read<int64_t>(), n_min = g.open_dataset("n_min").read<int64_t>();
  auto n_max = g.open_dataset("n_max").read<int64_t>();
  for (size_t i = 0; i < metric.size(); ++i) {
    if (i >= group.size() || i >= slope.size() || i >= intercept.size() || i >= r2.size() || i >= ci.size() ||
        i >= points.size() || i >= n_min.size() || i >= n_max.size())
      throw std::runtime_error("/fits: datasets of different lengths");
    fits.push_back({metric[i], group[i], slope[i], intercept[i], r2[i], ci[i], points[i], n_min[i], n_max[i]});
  }
  return fits;
}

bool same_number(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

bool same_fits(const std::vector<Fit>& a, const std::vector<Fit>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Fit &x = a[i], &y = b[i];
    if (x.metric != y.metric || x.group != y.group || !same_number(x.slope, y.slope) ||
        !same_number(x.intercept, y.intercept) || !same_number(x.r2, y.r2) ||
        !same_number(x.slope_ci95, y.slope_ci95) || x.points != y.points || x.n_min != y.n_min || x.n_max != y.n_max)
      return false;
  }
  return true;
}

Previous read_previous(const std::string& path) {
  Previous out;
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
    if (sizes.size() != files.size() || mtimes.size() != files.size() || rows.size() != files.size()) return out;
    for (size_t i = 0; i < files.size(); ++i)
      out.index[files[i]] = {sizes[i], mtimes[i], static_cast<int64_t>(i), std::move(rows[i])};
    if (out.index.size() != files.size()) {  // a name twice: not ours
      out.index.clear();
      return out;
    }
    try {
      out.cells = f.attribute_int64("cells");
      out.version = f.attribute_string("attnsweep_version");
      out.skipped = f.open_dataset("/skipped").read_strings();
      out.fits = read_fits(f);
      if (f.is_group("/trajectories")) {
        h5::Group t = f.open_group("/trajectories");
        for (const std::string& name : t.children()) out.trajectory_shapes[name] = t.open_dataset(name).shape();
      }
      out.complete = true;
    } catch (const std::exception&) {
      out.complete = false;  // the index alone still saves rereading the files
    }
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

// Restores a row from its index entry; false when the entry does not parse.
bool row_from_index(const IndexEntry& e, Row& row, std::map<std::string, TrajectoryInfo>& info) {
  try {
    json j = json::parse(e.json_text);
    row.summary = j.get<CellSummary>();
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

std::vector<Column> build_columns(const std::vector<Row>& rows) {
  std::vector<Column> cols;
  auto pick = [&](auto get) {
    std::vector<std::string> v;
    for (const Row& r : rows) v.push_back(get(r));
    return v;
  };
  // The fixed columns: the root attributes the result schema marks as columns.
  for (const ResultField* f : result_columns()) {
    Column c{Column::String, f->name, f->description, {}, {}, {}};
    const auto want = [&](ResultType t) {
      if (f->type != t) throw std::logic_error("aggregate: column " + f->name + " has another type in the schema");
    };
    if (f->name == "cell_id" || f->name == "status" || f->name == "device") {
      want(ResultType::string);
      c.strings = pick([&](const Row& r) {
        return f->name == "cell_id"  ? r.summary.cell_id
               : f->name == "status" ? std::string(to_string(r.summary.status))
                                     : r.summary.device;
      });
    } else if (f->name == "wall_seconds") {
      want(ResultType::float64);
      c.type = Column::Float;
      for (const Row& r : rows) c.floats.push_back(r.summary.wall_seconds);
    } else if (f->name == "diverged_at_step") {
      want(ResultType::int64);
      c.type = Column::Int;
      for (const Row& r : rows) c.ints.push_back(r.summary.diverged_at_step);
    } else {
      throw std::logic_error("aggregate: the result schema's column " + f->name + " is not in a cell's summary");
    }
    cols.push_back(std::move(c));
  }

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
    Column c{Column::Float,
             taken.count(key) ? "final." + key : key,
             "final metric (/final attribute " + key + ")",
             {},
             {},
             {}};
    taken.insert(c.name);
    for (const Row& r : rows) {
      auto it = r.summary.final_metrics.find(key);
      c.floats.push_back(it == r.summary.final_metrics.end() ? kNaN : it->second);
    }
    cols.push_back(std::move(c));
  }
  return cols;
}

// Fits of each metric against prompt_length per group of the other parameters.
std::vector<Fit> compute_fits(const std::vector<Row>& rows, const AggregateOptions& opt) {
  std::map<std::pair<std::string, std::string>, std::pair<std::vector<double>, std::vector<double>>> points;
  for (const Row& r : rows) {
    if (r.summary.status != CellStatus::complete) continue;
    auto n_it = r.params.find("prompt_length");
    if (n_it == r.params.end() || !n_it->second.is_number()) continue;
    const double n = n_it->second.get<double>();
    if (n < static_cast<double>(opt.fit_min_n) || n > static_cast<double>(opt.fit_max_n)) continue;
    const std::string group = group_label(r.params);
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

}  // namespace

double student_t_quantile(double p, double dof) {
  if (!(p > 0 && p < 1) || !(dof > 0)) return kNaN;
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
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

// File size and modification time in ns (the index's key), and inode.
bool file_stamp(const std::string& path, int64_t& size, int64_t& mtime_ns, uint64_t* ino = nullptr) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return false;
  size = static_cast<int64_t>(st.st_size);
  mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  if (ino != nullptr) *ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

// "FILE: reason" -> "reason" for messages that already name the file.
std::string strip_path(std::string msg, const std::string& path) {
  if (msg.rfind(path, 0) == 0) msg = msg.substr(path.size() + (msg.compare(path.size(), 2, ": ") == 0 ? 2 : 1));
  return msg;
}

// A fixed-size array in memory shared with the children forked after it is made
// (MAP_SHARED | MAP_ANONYMOUS): what a forked reader writes into it, its parent sees.
// Zero-filled; move-only.
template <class T>
class SharedArray {
 public:
  SharedArray() = default;
  explicit SharedArray(size_t n) : n_(n) {
    if (n == 0) return;
    void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw std::runtime_error("cannot map " + std::to_string(n * sizeof(T)) + " bytes of shared memory (" +
                               std::strerror(errno) + ")");
    p_ = static_cast<T*>(p);
  }
  ~SharedArray() {
    if (p_ != nullptr) ::munmap(p_, n_ * sizeof(T));
  }
  SharedArray(SharedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  SharedArray& operator=(SharedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  SharedArray(const SharedArray&) = delete;
  SharedArray& operator=(const SharedArray&) = delete;

  T* data() const { return p_; }
  T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// CPUs this process may run on (its affinity mask follows taskset and cgroup cpusets).
int cpu_count() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  const long n = ::sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// A forked child (pass 1's checksum verifier, a pass-2 reader) or none, waited for
// exactly once: by wait(), or, when it is no longer needed (an exception, pass 1 done),
// killed and reaped by the destructor. Move-only.
class Reader {
 public:
  Reader() = default;
  explicit Reader(pid_t pid) : pid_(pid) {}
  ~Reader() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    wait();
  }
  Reader(Reader&& o) noexcept : pid_(std::exchange(o.pid_, -1)) {}
  Reader& operator=(Reader&& o) noexcept {
    std::swap(pid_, o.pid_);
    return *this;
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  bool running() const { return pid_ > 0; }
  // True when the child exited with status 0 (it did all it took on).
  bool wait() {
    int status = 0;
    pid_t got;
    while ((got = ::waitpid(pid_, &status, 0)) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return got > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

 private:
  pid_t pid_ = -1;
};

// A file whose checksum pass 1's forked child found holding, and the file's stamp then.
struct Verified {
  unsigned char ok;  // stored last (release): the fields below are set
  uint64_t ino;
  int64_t size, mtime_ns;
};

// Pass 1's forked child: verifies the checksums of files[todo[0]], files[todo[1]], ...
// ahead of pass 1, skipping those that pass 1 has reached (the files before passed[0]),
// and marks those that hold in `verified`. Reads files only (no libhdf5); never returns.
[[noreturn]] void verify_ahead(const std::vector<std::string>& files, const std::vector<size_t>& todo,
                               const SharedArray<Verified>& verified, const SharedArray<uint64_t>& passed,
                               int test_reader) {
  int rc = 0;
  try {
    for (const size_t i : todo) {
      if (i < std::atomic_ref<uint64_t>(passed[0]).load(std::memory_order_relaxed)) continue;
      Verified& v = verified[i];
      if (file_stamp(files[i], v.size, v.mtime_ns, &v.ino) && cell_file_damage(files[i]).empty())
        std::atomic_ref<unsigned char>(v.ok).store(1, std::memory_order_release);
      if (test_reader == 2) ::raise(SIGKILL);
    }
  } catch (...) {
    rc = 1;
  }
  ::_exit(rc);
}

// What became of each changed row of a block that a forked reader helps read.
constexpr unsigned char kRowPending = 0;  // not claimed yet, or claimed by a child that died reading it
constexpr unsigned char kRowRead = 1;     // read by the child
constexpr unsigned char kRowFailed = 2;   // the child could not read it
constexpr unsigned char kRowParent = 3;   // claimed (and read) by the parent

// One /trajectories dataset while it is written: a block of rows in memory at a time.
struct OutTrajectory {
  std::string name;
  std::vector<uint64_t> row_shape;  // [T] or [T, L, H]
  uint64_t row_elems = 0;
  bool f32 = false;  // float32 ([cells, T, L, H]) or float64 ([cells, T])
  std::optional<h5::Dataset> dst;
  std::optional<h5::Dataset> old;  // the same dataset of the previous aggregate.h5, same rank
  std::vector<uint64_t> old_row_shape;
  // The buffer [buffer_rows, row_shape...] of two blocks (one is filled while the other
  // is written), NaN where nothing is read: in shared memory, since a forked reader fills
  // some of its rows (pass 2). Rows below are the buffer's.
  uint64_t buffer_rows = 0;
  SharedArray<double> d;
  SharedArray<float> f;

  void allocate(uint64_t rows) {
    buffer_rows = rows;
    if (f32)
      f = SharedArray<float>(rows * row_elems);
    else
      d = SharedArray<double>(rows * row_elems);
  }
  void fill_rows(uint64_t from, uint64_t to) {
    if (f32)
      std::fill(f.data() + from * row_elems, f.data() + to * row_elems, std::numeric_limits<float>::quiet_NaN());
    else
      std::fill(d.data() + from * row_elems, d.data() + to * row_elems, kNaN);
  }
  // Reads `count` of `src` at `offset` into the buffer, from row `row` on (the rest
  // stays NaN): a cell file's dataset (rank of a row) into that row, or a run of rows
  // of the previous aggregate (rank of a row + 1) into as many rows.
  template <class T>
  void read_into(const SharedArray<T>& buf, const h5::Dataset& src, const std::vector<uint64_t>& offset,
                 const std::vector<uint64_t>& count, uint64_t row) {
    if (count.size() == row_shape.size()) {
      src.read_block_into<T>(offset, count, std::span<T>(buf.data() + row * row_elems, row_elems), row_shape,
                             std::vector<uint64_t>(count.size(), 0));
      return;
    }
    std::vector<uint64_t> mem_shape{buffer_rows}, mem_offset(count.size(), 0);
    mem_shape.insert(mem_shape.end(), row_shape.begin(), row_shape.end());
    mem_offset[0] = row;
    src.read_block_into<T>(offset, count, std::span<T>(buf.data(), buffer_rows * row_elems), mem_shape, mem_offset);
  }
  void read_into(const h5::Dataset& src, const std::vector<uint64_t>& offset, const std::vector<uint64_t>& count,
                 uint64_t row) {
    if (f32)
      read_into(f, src, offset, count, row);
    else
      read_into(d, src, offset, count, row);
  }
  // Writes `rows` rows of the buffer from row `from` on as rows first_row... of the dataset.
  void write(uint64_t first_row, uint64_t rows, uint64_t from) {
    std::vector<uint64_t> offset(row_shape.size() + 1, 0), count{rows};
    offset[0] = first_row;
    count.insert(count.end(), row_shape.begin(), row_shape.end());
    if (f32)
      dst->write_block<float>(offset, count, std::span<const float>(f.data() + from * row_elems, rows * row_elems));
    else
      dst->write_block<double>(offset, count, std::span<const double>(d.data() + from * row_elems, rows * row_elems));
  }
};

// Sets the file's modification time to now (an unchanged aggregate is up to date).
void touch(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
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
  const Previous previous = opt.reuse_previous ? read_previous(out_path) : Previous{};
  // Two processes read the cell files when there are enough of them (and 2 CPUs); 16
  // changed files (some 20 ms of reading) are well worth a fork (under a ms).
  const int64_t fork_min = opt.fork_min_rows >= 0 ? opt.fork_min_rows : cpu_count() >= 2 ? 16 : 0;

  AggregateResult result;
  // Pass 1: summaries, parameters and trajectory shapes; no datasets are read. A file
  // whose size and mtime match the previous aggregate's index is not opened at all;
  // any other is opened once here (and once more in pass 2 for its datasets).
  //
  // The checksums (nearly half of pass 1) are verified ahead of it by a forked child
  // when there are enough files to read: it checks, in order, each file that does not
  // match the index and marks those whose checksum holds, with the file's inode, size
  // and mtime when it checked. A file so marked, with the stamp taken here, is not
  // checked again; any other (damaged, changed since, or not reached by the child) is
  // checked here, so skipped messages are those of one process. The child only reads
  // files (no libhdf5) and ends with _exit().
  struct Stamp {
    bool ok = false;  // false: stat failed
    int64_t size = 0, mtime_ns = 0;
    uint64_t ino = 0;
  };
  // Every file's stamp, taken first: the files that do not match the index are those
  // that the child checks.
  std::vector<std::string> paths;
  std::vector<Stamp> stamps(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    paths.push_back((runs / names[i]).string());
    stamps[i].ok = file_stamp(paths[i], stamps[i].size, stamps[i].mtime_ns, &stamps[i].ino);
  }
  SharedArray<Verified> verified;
  SharedArray<uint64_t> passed;  // [0]: pass 1 is past the files before this one
  Reader verifier;
  if (fork_min > 0) {
    std::vector<size_t> todo;
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = previous.index.find(names[i]);
      if (!stamps[i].ok || it == previous.index.end() || it->second.size != stamps[i].size ||
          it->second.mtime_ns != stamps[i].mtime_ns)
        todo.push_back(i);
    }
    if (todo.size() >= static_cast<uint64_t>(fork_min)) {
      verified = SharedArray<Verified>(names.size());
      passed = SharedArray<uint64_t>(1);
      const pid_t pid = ::fork();  // -1: every checksum is verified here
      if (pid == 0) verify_ahead(paths, todo, verified, passed, opt.test_reader);
      if (pid > 0) {
        verifier = Reader(pid);
        ++result.forks;
        if (opt.test_reader != 0) verifier.wait();  // tests: every checksum the child's
      }
    }
  }
  std::vector<Row> rows;
  std::map<std::string, TrajectoryInfo> trajectories;
  for (size_t idx = 0; idx < names.size(); ++idx) {
    const std::string& name = names[idx];
    const std::string rel = "runs/" + name, &path = paths[idx];
    const std::string id = fs::path(name).stem().string();  // runs/<cell_id>.h5
    if (verifier.running()) std::atomic_ref<uint64_t>(passed[0]).store(idx + 1, std::memory_order_relaxed);
    const bool stamped = stamps[idx].ok;
    const int64_t size = stamps[idx].size, mtime = stamps[idx].mtime_ns;
    if (stamped) {
      auto it = previous.index.find(name);
      if (it != previous.index.end() && it->second.size == size && it->second.mtime_ns == mtime) {
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
    Row row{rel, {}, {}, {}, size, mtime, -1};
    try {
      // The checksum first: libhdf5 can crash or hang on a damaged file.
      Verified* v = verified.data() != nullptr ? &verified[idx] : nullptr;
      const bool held = v != nullptr && stamped &&
                        std::atomic_ref<unsigned char>(v->ok).load(std::memory_order_acquire) == 1 &&
                        v->ino == stamps[idx].ino && v->size == size && v->mtime_ns == mtime;
      if (std::string damaged = held ? std::string() : cell_file_damage(path); !damaged.empty()) {
        result.skipped.push_back(rel + ": " + damaged);
        continue;
      }
      h5::File f = h5::File::open_read_in_memory(path);
      std::string why;
      auto summary = read_valid_cell_summary(f, id, &why);
      if (!summary) {
        result.skipped.push_back(rel + ": " + why);
        continue;
      }
      row.summary = std::move(*summary);
      std::map<std::string, TrajectoryInfo> found;
      for (const std::string& g : kTrajectoryGroups)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 1, row.trajectories, found, trajectories);
      for (const std::string& g : kTrajectoryGroups3)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 3, row.trajectories, found, trajectories);
      for (const auto& [k, t] : found) {
        TrajectoryInfo& all = trajectories[k];
        merge_shape(all.shape, t.shape);
        if (all.description.empty()) all.description = t.description;
      }
    } catch (const std::exception& e) {
      result.skipped.push_back(rel + ": " + strip_path(e.what(), path));
      continue;
    }
    flatten(row.summary.config, "", row.params);
    if (!stamped) row.size = row.mtime_ns = -1;  // never matches: reread next time
    rows.push_back(std::move(row));
    ++result.reread;
  }
  if (verifier.running()) verifier = Reader();  // killed and reaped, if not done yet
  result.cells = static_cast<int64_t>(rows.size());
  const uint64_t cells = rows.size();

  std::vector<Column> cols = build_columns(rows);
  for (const Column& c : cols) result.columns.push_back(c.name);
  result.fits = compute_fits(rows, opt);
  {
    std::vector<CellRow> analysed;
    for (const Row& r : rows)
      analysed.push_back({r.params, r.summary.final_metrics, r.summary.status == CellStatus::complete});
    result.paired = paired_differences(analysed);
    result.best_scale = best_scales(analysed);
  }
  // DIR/paired.csv and DIR/best_scale.csv when the cells hold comparisons or numeric
  // scales (a stale one goes).
  auto write_analyses_csv = [&] {
    const std::string paired_csv = (root / "paired.csv").string(), best_csv = (root / "best_scale.csv").string();
    if (!result.paired.empty())
      write_paired(paired_csv, result.paired);
    else
      fs::remove(paired_csv, ec);
    if (!result.best_scale.best.empty())
      write_best_scale(best_csv, result.best_scale);
    else
      fs::remove(best_csv, ec);
  };

  // Nothing changed since the previous aggregate (same files, same stamps, same order,
  // same fits and skipped files): it is already what would be written. Rewrite nothing
  // but the small CSV, and mark aggregate.h5 as up to date.
  bool unchanged = previous.complete && result.reread == 0 && previous.index.size() == cells &&
                   previous.cells == result.cells && previous.version == ATTNSWEEP_VERSION &&
                   previous.skipped == result.skipped && same_fits(previous.fits, result.fits) &&
                   previous.trajectory_shapes.size() == trajectories.size();
  for (uint64_t i = 0; unchanged && i < cells; ++i) unchanged = rows[i].old_row == static_cast<int64_t>(i);
  for (const auto& [name, t] : trajectories) {
    if (!unchanged) break;
    std::vector<uint64_t> shape{cells};
    shape.insert(shape.end(), t.shape.begin(), t.shape.end());
    auto it = previous.trajectory_shapes.find(name);
    unchanged = it != previous.trajectory_shapes.end() && it->second == shape;
  }
  if (unchanged) {
    write_csv((root / "summary.csv").string(), cols, rows.size());
    write_analyses_csv();
    touch(out_path);
    return result;
  }

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
    // Pass 2: the trajectories, a block of rows at a time: [cells, T] float64 and
    // [cells, T, L, H] float32, contiguous and uncompressed, NaN-padded. A block's rows
    // are filled in memory (a changed file's datasets read straight into their rows;
    // runs of unchanged rows read in one call each from the previous aggregate.h5) and
    // written with one call per dataset. Memory: about kBlockBytes, in two buffers of a
    // block each, so that one block is filled while the other is written.
    //
    // Reading the changed files is most of the time of a first aggregate, so with 2 CPUs
    // a block with enough of them is read by two processes: a forked child and this one
    // claim its changed files one at a time (a shared counter) and read them into the
    // buffer (shared memory). The child of the next block is forked before this block
    // is written, so that it reads while this process writes; this process alone writes
    // the output file. The child only opens cell files (read-only, in memory) and ends
    // with _exit(): exit() would run libhdf5's atexit handler, which would flush and
    // close the output file that the child inherited. It marks each row it read, or
    // failed to read, in `state`; a row it did not read (a failure, a child that died,
    // or one that could not be forked) is read by this process after waiting for it,
    // the one-process way, so rows, NaN padding and skipped messages (kept in row order)
    // are exactly those of one process. libhdf5 is not thread-safe; a forked child has
    // its own copy of it.
    {
      std::optional<h5::File> old_file;
      bool any_old = false;
      for (const Row& r : rows) any_old |= r.old_row >= 0 && !r.trajectories.empty();
      if (any_old) old_file.emplace(h5::File::open_read(out_path));

      h5::Group g = f.require_group("/trajectories");
      std::vector<OutTrajectory> outs;
      std::map<std::string, size_t> out_of;
      uint64_t row_bytes = 0;
      for (const auto& [name, t] : trajectories) {
        OutTrajectory o;
        o.name = name;
        o.row_shape = t.shape;
        o.row_elems = std::accumulate(t.shape.begin(), t.shape.end(), uint64_t{1}, std::multiplies<>());
        o.f32 = t.shape.size() != 1;
        std::vector<uint64_t> shape{cells};
        shape.insert(shape.end(), t.shape.begin(), t.shape.end());
        const std::string axes = o.f32 ? "[cells, T, L, H]" : "[cells, T]";
        const std::string desc = (t.description.empty() ? name : t.description) + " " + axes + ", NaN-padded";
        if (o.f32)
          o.dst.emplace(g.create_contiguous<float>(name, shape, std::numeric_limits<float>::quiet_NaN(), desc));
        else
          o.dst.emplace(g.create_contiguous<double>(name, shape, kNaN, desc));
        if (old_file && old_file->is_dataset("/trajectories/" + name)) {
          h5::Dataset od = old_file->open_dataset("/trajectories/" + name);
          auto os = od.shape();
          if (os.size() == shape.size()) {
            o.old_row_shape.assign(os.begin() + 1, os.end());
            o.old.emplace(std::move(od));
          }
        }
        row_bytes += o.row_elems * (o.f32 ? sizeof(float) : sizeof(double));
        out_of[name] = outs.size();
        outs.push_back(std::move(o));
      }
      constexpr uint64_t kBlockBytes = uint64_t{64} << 20;
      const uint64_t block = std::clamp<uint64_t>(opt.block_rows > 0 ? static_cast<uint64_t>(opt.block_rows)
                                                  : row_bytes        ? kBlockBytes / 2 / row_bytes
                                                                     : cells,
                                                  1, std::max<uint64_t>(cells, 1));
      for (OutTrajectory& o : outs) o.allocate(2 * block);  // block b in rows [b % 2 * block, ...)
      // Shared with the readers: what became of each buffer row, and per half of the
      // buffer the next index into its block's changed rows to claim.
      SharedArray<unsigned char> state(fork_min > 0 ? 2 * block : 0);
      SharedArray<uint64_t> next(fork_min > 0 ? 2 : 0);
      auto claim = [&](uint64_t half) { return std::atomic_ref<uint64_t>(next[half]).fetch_add(1); };

      // Reads the changed row b0 + i from its cell file into buffer row base + i: "" when
      // read, else the skipped message (the row is then all NaN).
      auto read_row = [&](uint64_t b0, uint64_t base, uint64_t i) -> std::string {
        const Row& row = rows[b0 + i];
        try {
          h5::File cell = h5::File::open_read_in_memory((root / row.file).string());
          for (const TrajectorySource& src : row.trajectories) {
            OutTrajectory& o = outs[out_of.at(src.name)];
            if (o.row_shape.size() != src.shape.size()) continue;  // rank differs from the other cells'
            h5::Dataset d = cell.open_dataset(src.path);
            if (d.shape() != src.shape) d.fail("shape changed since the file was first read");
            o.read_into(d, std::vector<uint64_t>(src.shape.size(), 0), src.shape, base + i);
          }
          return {};
        } catch (const h5::Error& e) {
          for (OutTrajectory& o : outs) o.fill_rows(base + i, base + i + 1);
          return row.file + ": trajectories not read (row kept): " + e.what();
        }
      };

      // Rows [b0, b0 + n) in buffer rows [half * block, ...), while they are read.
      struct BlockRead {
        uint64_t b0 = 0, n = 0, half = 0;
        std::vector<uint64_t> changed;  // i of the rows b0 + i read from their cell files
        Reader reader;                  // the forked child reading some of them, if any
      };
      // Starts reading a block: NaN, the rows copied from the previous aggregate, and,
      // when it has enough changed files, a forked child that starts on them.
      auto start = [&](uint64_t b0, uint64_t half) {
        BlockRead r;
        r.b0 = b0;
        r.n = std::min(block, cells - b0);
        r.half = half;
        const uint64_t base = half * block;
        for (OutTrajectory& o : outs) o.fill_rows(base, base + r.n);
        // Runs of rows copied from the previous aggregate: consecutive there and here.
        for (uint64_t i = 0; i < r.n;) {
          const Row& row = rows[b0 + i];
          if (row.old_row < 0 || row.trajectories.empty()) {
            ++i;
            continue;
          }
          uint64_t len = 1;
          while (i + len < r.n && rows[b0 + i + len].old_row == row.old_row + static_cast<int64_t>(len) &&
                 !rows[b0 + i + len].trajectories.empty())
            ++len;
          for (OutTrajectory& o : outs) {
            if (!o.old) continue;
            std::vector<uint64_t> offset(o.row_shape.size() + 1, 0), count{len};
            offset[0] = static_cast<uint64_t>(row.old_row);
            for (size_t k = 0; k < o.row_shape.size(); ++k)
              count.push_back(std::min(o.row_shape[k], o.old_row_shape[k]));
            o.read_into(*o.old, offset, count, base + i);
          }
          i += len;
        }
        // Changed files: each opened once, its datasets read into their rows.
        for (uint64_t i = 0; i < r.n; ++i)
          if (rows[b0 + i].old_row < 0 && !rows[b0 + i].trajectories.empty()) r.changed.push_back(i);
        if (fork_min > 0 && r.changed.size() >= static_cast<uint64_t>(fork_min)) {
          next[half] = 0;
          std::fill(state.data() + base, state.data() + base + r.n, kRowPending);
          const pid_t pid = ::fork();  // -1: this process reads them all
          if (pid == 0) {
            int rc = 0;
            try {
              for (uint64_t k; (k = claim(half)) < r.changed.size();) {
                const uint64_t i = r.changed[k];
                state[base + i] = read_row(b0, base, i).empty() ? kRowRead : kRowFailed;
                if (opt.test_reader == 2) ::raise(SIGKILL);
              }
            } catch (...) {
              rc = 1;  // not an h5::Error: the parent reads the rows again and meets it itself
            }
            ::_exit(rc);
          }
          if (pid > 0) r.reader = Reader(pid);
        }
        return r;
      };
      // Finishes reading a block: the changed files that the child (if any) left or could
      // not read; then the block's skipped messages, in row order.
      auto finish = [&](BlockRead& r) {
        const uint64_t base = r.half * block;
        std::vector<std::string> why(r.n);
        if (r.reader.running()) {
          if (opt.test_reader == 0)
            for (uint64_t k; (k = claim(r.half)) < r.changed.size();) {
              const uint64_t i = r.changed[k];
              state[base + i] = kRowParent;
              why[i] = read_row(r.b0, base, i);
            }
          const bool clean = r.reader.wait();
          for (uint64_t i : r.changed) {
            const unsigned char s = state[base + i];
            if (s == kRowParent || (clean && s == kRowRead)) continue;
            for (OutTrajectory& o : outs) o.fill_rows(base + i, base + i + 1);  // whatever the child left of it
            why[i] = read_row(r.b0, base, i);
          }
          ++result.forks;
        } else {
          for (uint64_t i : r.changed) why[i] = read_row(r.b0, base, i);
        }
        for (std::string& w : why)
          if (!w.empty()) result.skipped.push_back(std::move(w));
      };

      std::optional<BlockRead> current;
      if (cells > 0 && !outs.empty()) current = start(0, 0);
      while (current) {
        finish(*current);
        std::optional<BlockRead> following;  // its child reads while this block is written
        if (const uint64_t b0 = current->b0 + current->n; b0 < cells) following = start(b0, 1 - current->half);
        for (OutTrajectory& o : outs) o.write(current->b0, current->n, current->half * block);
        f.start_writeback();
        current = std::move(following);
      }
    }
    write_fits(f, result.fits);
    if (!result.paired.empty()) write_paired_group(f, result.paired);
    write_best_scale_group(f, result.best_scale);
    f.write_strings("/skipped", result.skipped, "runs/NAME: why a result file was left out");
    write_index(f, rows, trajectories);
    f.close();
  }
  commit_file(tmp, out_path);
  guard.release();

  write_csv((root / "summary.csv").string(), cols, rows.size());
  write_analyses_csv();
  return result;
}

}  // namespace attnsweep
