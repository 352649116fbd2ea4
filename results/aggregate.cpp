// aggregate_dir (results/aggregate.h): pass 1 over the cell files (summaries, parameters,
// trajectory shapes), then aggregate.h5 with pass 2 (the trajectories, a block of rows at
// a time), and what only it uses. Its parts: aggregate_rows (the rows), aggregate_index
// (the previous aggregate), fits, cell_reader (two processes reading).
#include "results/aggregate.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include "base/atomic_file.h"
#include "experiments/result_schema.h"
#include "results/aggregate_index.h"
#include "results/aggregate_rows.h"
#include "results/best_scale.h"
#include "results/cell_file.h"
#include "results/cell_reader.h"
#include "results/h5.h"
#include "results/paired.h"
#include "results/run_manifest.h"
#include "results/table.h"

namespace attnsweep {
namespace fs = std::filesystem;
using namespace aggregation;
namespace {

// Groups of a cell file whose 1-D datasets become /trajectories/<group>_<name>
// (/train, /eval, /icl).
const std::vector<std::string> kTrajectoryGroups = trajectory_groups(1);

// Groups of a cell file whose [T, L, H] datasets become /trajectories/<group>_<name>
// [cells, T, L, H] (float32, NaN-padded): the per-layer, per-head norms over training.
const std::vector<std::string> kTrajectoryGroups3 = trajectory_groups(3);

// "FILE: reason" -> "reason" for messages that already name the file.
std::string strip_path(std::string msg, const std::string& path) {
  if (msg.rfind(path, 0) == 0) msg = msg.substr(path.size() + (msg.compare(path.size(), 2, ": ") == 0 ? 2 : 1));
  return msg;
}

// Sets the file's modification time to now (an unchanged aggregate is up to date).
void touch(const std::string& path) {
  ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
}

// A file's size, mtime and inode when pass 1 began.
struct Stamp {
  bool ok = false;  // false: stat failed
  int64_t size = 0, mtime_ns = 0;
  uint64_t ino = 0;
};

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
class TrajectoryPass {
 public:
  TrajectoryPass(const fs::path& root, const std::vector<Row>& rows, int64_t fork_min, const AggregateOptions& opt,
                 AggregateResult& result)
      : root_(root), rows_(rows), cells_(rows.size()), fork_min_(fork_min), opt_(opt), result_(result) {}

  // /trajectories of f, from the rows and the previous aggregate at out_path.
  void run(h5::File& f, const std::map<std::string, TrajectoryInfo>& trajectories, const std::string& out_path) {
    std::optional<h5::File> old_file;
    bool any_old = false;
    for (const Row& r : rows_) any_old |= r.old_row >= 0 && !r.trajectories.empty();
    if (any_old) old_file.emplace(h5::File::open_read(out_path));
    h5::Group g = f.require_group("/trajectories");
    const uint64_t row_bytes = create_outputs(g, trajectories, old_file);
    constexpr uint64_t kBlockBytes = uint64_t{64} << 20;
    block_ = std::clamp<uint64_t>(opt_.block_rows > 0 ? static_cast<uint64_t>(opt_.block_rows)
                                  : row_bytes         ? kBlockBytes / 2 / row_bytes
                                                      : cells_,
                                  1, std::max<uint64_t>(cells_, 1));
    for (OutTrajectory& o : outs_) o.allocate(2 * block_);  // block b in rows [b % 2 * block, ...)
    state_ = SharedArray<unsigned char>(fork_min_ > 0 ? 2 * block_ : 0);
    next_ = SharedArray<uint64_t>(fork_min_ > 0 ? 2 : 0);

    std::optional<BlockRead> current;
    if (cells_ > 0 && !outs_.empty()) current = start(0, 0);
    while (current) {
      finish(*current);
      std::optional<BlockRead> following;  // its child reads while this block is written
      if (const uint64_t b0 = current->b0 + current->n; b0 < cells_) following = start(b0, 1 - current->half);
      for (OutTrajectory& o : outs_) o.write(current->b0, current->n, current->half * block_);
      f.start_writeback();
      current = std::move(following);
    }
  }

 private:
  // Rows [b0, b0 + n) in buffer rows [half * block, ...), while they are read.
  struct BlockRead {
    uint64_t b0 = 0, n = 0, half = 0;
    std::vector<uint64_t> changed;  // i of the rows b0 + i read from their cell files
    Reader reader;                  // the forked child reading some of them, if any
  };

  // One output dataset a trajectory (and its rows in the previous aggregate, if any);
  // returns the bytes of one row of them all.
  uint64_t create_outputs(h5::Group& g, const std::map<std::string, TrajectoryInfo>& trajectories,
                          std::optional<h5::File>& old_file) {
    uint64_t row_bytes = 0;
    for (const auto& [name, t] : trajectories) {
      OutTrajectory o;
      o.name = name;
      o.row_shape = t.shape;
      o.row_elems = std::accumulate(t.shape.begin(), t.shape.end(), uint64_t{1}, std::multiplies<>());
      o.f32 = t.shape.size() != 1;
      std::vector<uint64_t> shape{cells_};
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
      out_of_[name] = outs_.size();
      outs_.push_back(std::move(o));
    }
    return row_bytes;
  }

  // Shared with the readers: per half of the buffer the next index into its block's
  // changed rows to claim.
  uint64_t claim(uint64_t half) { return std::atomic_ref<uint64_t>(next_[half]).fetch_add(1); }

  // Reads the changed row b0 + i from its cell file into buffer row base + i: "" when
  // read, else the skipped message (the row is then all NaN).
  std::string read_row(uint64_t b0, uint64_t base, uint64_t i) {
    const Row& row = rows_[b0 + i];
    try {
      h5::File cell = h5::File::open_read_in_memory((root_ / row.file).string());
      for (const TrajectorySource& src : row.trajectories) {
        OutTrajectory& o = outs_[out_of_.at(src.name)];
        if (o.row_shape.size() != src.shape.size()) continue;  // rank differs from the other cells'
        h5::Dataset d = cell.open_dataset(src.path);
        if (d.shape() != src.shape) d.fail("shape changed since the file was first read");
        o.read_into(d, std::vector<uint64_t>(src.shape.size(), 0), src.shape, base + i);
      }
      return {};
    } catch (const h5::Error& e) {
      for (OutTrajectory& o : outs_) o.fill_rows(base + i, base + i + 1);
      return row.file + ": trajectories not read (row kept): " + e.what();
    }
  }

  // Runs of rows of the block copied from the previous aggregate: consecutive there and here.
  void copy_old_rows(const BlockRead& r, uint64_t base) {
    for (uint64_t i = 0; i < r.n;) {
      const Row& row = rows_[r.b0 + i];
      if (row.old_row < 0 || row.trajectories.empty()) {
        ++i;
        continue;
      }
      uint64_t len = 1;
      while (i + len < r.n && rows_[r.b0 + i + len].old_row == row.old_row + static_cast<int64_t>(len) &&
             !rows_[r.b0 + i + len].trajectories.empty())
        ++len;
      for (OutTrajectory& o : outs_) {
        if (!o.old) continue;
        std::vector<uint64_t> offset(o.row_shape.size() + 1, 0), count{len};
        offset[0] = static_cast<uint64_t>(row.old_row);
        for (size_t k = 0; k < o.row_shape.size(); ++k) count.push_back(std::min(o.row_shape[k], o.old_row_shape[k]));
        o.read_into(*o.old, offset, count, base + i);
      }
      i += len;
    }
  }

  // Starts reading a block: NaN, the rows copied from the previous aggregate, and,
  // when it has enough changed files, a forked child that starts on them.
  BlockRead start(uint64_t b0, uint64_t half) {
    BlockRead r;
    r.b0 = b0;
    r.n = std::min(block_, cells_ - b0);
    r.half = half;
    const uint64_t base = half * block_;
    for (OutTrajectory& o : outs_) o.fill_rows(base, base + r.n);
    copy_old_rows(r, base);
    // Changed files: each opened once, its datasets read into their rows.
    for (uint64_t i = 0; i < r.n; ++i)
      if (rows_[b0 + i].old_row < 0 && !rows_[b0 + i].trajectories.empty()) r.changed.push_back(i);
    if (fork_min_ > 0 && r.changed.size() >= static_cast<uint64_t>(fork_min_)) {
      next_[half] = 0;
      std::fill(state_.data() + base, state_.data() + base + r.n, kRowPending);
      const pid_t pid = ::fork();  // -1: this process reads them all
      if (pid == 0) child_reads(r, base);
      if (pid > 0) r.reader = Reader(pid);
    }
    return r;
  }

  // The forked child of a block: claims and reads changed rows until none is left.
  [[noreturn]] void child_reads(const BlockRead& r, uint64_t base) {
    int rc = 0;
    try {
      for (uint64_t k; (k = claim(r.half)) < r.changed.size();) {
        const uint64_t i = r.changed[k];
        state_[base + i] = read_row(r.b0, base, i).empty() ? kRowRead : kRowFailed;
        if (opt_.test_reader == 2) ::raise(SIGKILL);
      }
    } catch (...) {
      rc = 1;  // not an h5::Error: the parent reads the rows again and meets it itself
    }
    ::_exit(rc);
  }

  // Finishes reading a block: the changed files that the child (if any) left or could
  // not read; then the block's skipped messages, in row order.
  void finish(BlockRead& r) {
    const uint64_t base = r.half * block_;
    std::vector<std::string> why(r.n);
    if (r.reader.running()) {
      if (opt_.test_reader == 0)
        for (uint64_t k; (k = claim(r.half)) < r.changed.size();) {
          const uint64_t i = r.changed[k];
          state_[base + i] = kRowParent;
          why[i] = read_row(r.b0, base, i);
        }
      const bool clean = r.reader.wait();
      for (uint64_t i : r.changed) {
        const unsigned char s = state_[base + i];
        if (s == kRowParent || (clean && s == kRowRead)) continue;
        for (OutTrajectory& o : outs_) o.fill_rows(base + i, base + i + 1);  // whatever the child left of it
        why[i] = read_row(r.b0, base, i);
      }
      ++result_.forks;
    } else {
      for (uint64_t i : r.changed) why[i] = read_row(r.b0, base, i);
    }
    for (std::string& w : why)
      if (!w.empty()) result_.skipped.push_back(std::move(w));
  }

  const fs::path& root_;
  const std::vector<Row>& rows_;
  const uint64_t cells_;
  const int64_t fork_min_;
  const AggregateOptions& opt_;
  AggregateResult& result_;
  std::vector<OutTrajectory> outs_;
  std::map<std::string, size_t> out_of_;
  uint64_t block_ = 1;
  // Shared with the readers: what became of each buffer row (state_), and next_ (claim).
  SharedArray<unsigned char> state_;
  SharedArray<uint64_t> next_;
};

// aggregate_dir's run: pass 1 over the files, the analyses, then aggregate.h5 (unless
// nothing changed) and the CSV files.
class Aggregation {
 public:
  Aggregation(const std::string& dir, const AggregateOptions& opt)
      : dir_(dir),
        opt_(opt),
        root_(dir),
        runs_(root_ / "runs"),
        out_root_(opt.out_dir.empty() ? root_ : fs::path(opt.out_dir)),
        out_path_((out_root_ / "aggregate.h5").string()) {}

  AggregateResult run() {
    list_files();
    previous_ = opt_.reuse_previous ? read_previous(out_path_) : Previous{};
    // Two processes read the cell files when there are enough of them (and 2 CPUs); 16
    // changed files (some 20 ms of reading) are well worth a fork (under a ms).
    fork_min_ = opt_.fork_min_rows >= 0 ? opt_.fork_min_rows : cpu_count() >= 2 ? 16 : 0;
    pass1();
    result_.cells = static_cast<int64_t>(rows_.size());
    cols_ = build_columns(rows_);
    for (const Column& c : cols_) result_.columns.push_back(c.name);
    result_.fits = compute_fits(rows_, opt_);
    std::vector<CellRow> analysed;
    for (const Row& r : rows_)
      analysed.push_back({r.params, r.summary.final_metrics, r.summary.status == CellStatus::complete});
    result_.paired = paired_differences(analysed);
    result_.best_scale = best_scales(analysed);
    // Nothing changed since the previous aggregate: it is already what would be written.
    // Rewrite nothing but the small CSV, and mark aggregate.h5 as up to date.
    const bool same = unchanged();
    if (!same) write_aggregate();
    write_csv((out_root_ / "summary.csv").string(), cols_, rows_.size());
    write_analyses_csv();
    if (same) touch(out_path_);
    return std::move(result_);
  }

 private:
  // runs/*.h5 (not a writer's temporaries), sorted, with their stamps.
  void list_files() {
    // Not the cells a grid changed with run --force dropped (results/run_manifest.h).
    names_ = result_file_names(dir_, &result_.not_in_grid);
    stamps_.resize(names_.size());
    for (size_t i = 0; i < names_.size(); ++i) {
      paths_.push_back((runs_ / names_[i]).string());
      stamps_[i].ok = file_stamp(paths_[i], stamps_[i].size, stamps_[i].mtime_ns, &stamps_[i].ino);
    }
  }

  // Whether file i matches its row of the previous aggregate's index.
  bool indexed(size_t i) const {
    auto it = previous_.index.find(names_[i]);
    return stamps_[i].ok && it != previous_.index.end() && it->second.size == stamps_[i].size &&
           it->second.mtime_ns == stamps_[i].mtime_ns;
  }

  // The checksums (nearly half of pass 1) are verified ahead of it by a forked child
  // when there are enough files to read: it checks, in order, each file that does not
  // match the index and marks those whose checksum holds, with the file's inode, size
  // and mtime when it checked. A file so marked, with the stamp taken here, is not
  // checked again; any other (damaged, changed since, or not reached by the child) is
  // checked here, so skipped messages are those of one process. The child only reads
  // files (no libhdf5) and ends with _exit().
  void start_verifier() {
    if (fork_min_ <= 0) return;
    std::vector<size_t> todo;
    for (size_t i = 0; i < names_.size(); ++i)
      if (!indexed(i)) todo.push_back(i);
    if (todo.size() < static_cast<uint64_t>(fork_min_)) return;
    verified_ = SharedArray<Verified>(names_.size());
    passed_ = SharedArray<uint64_t>(1);  // [0]: pass 1 is past the files before this one
    const pid_t pid = ::fork();          // -1: every checksum is verified here
    if (pid == 0) verify_ahead(paths_, todo, verified_, passed_, opt_.test_reader);
    if (pid > 0) {
      verifier_ = Reader(pid);
      ++result_.forks;
      if (opt_.test_reader != 0) verifier_.wait();  // tests: every checksum the child's
    }
  }

  // Pass 1: summaries, parameters and trajectory shapes; no datasets are read. A file
  // whose size and mtime match the previous aggregate's index is not opened at all;
  // any other is opened once here (and once more in pass 2 for its datasets).
  void pass1() {
    start_verifier();
    for (size_t idx = 0; idx < names_.size(); ++idx) {
      if (verifier_.running()) std::atomic_ref<uint64_t>(passed_[0]).store(idx + 1, std::memory_order_relaxed);
      if (reuse_row(idx))
        ++result_.reused;
      else if (read_row(idx))
        ++result_.reread;
    }
    if (verifier_.running()) verifier_ = Reader();  // killed and reaped, if not done yet
  }

  // File idx's row from the previous aggregate's index, when its stamp matches.
  bool reuse_row(size_t idx) {
    if (!indexed(idx)) return false;
    const std::string id = fs::path(names_[idx]).stem().string();  // runs/<cell_id>.h5
    Row row;
    row.file = "runs/" + names_[idx];
    std::map<std::string, TrajectoryInfo> merged = trajectories_;
    if (!row_from_index(previous_.index.find(names_[idx])->second, row, merged) || row.summary.cell_id != id)
      return false;
    trajectories_ = std::move(merged);
    flatten(row.summary.config, "", row.params);
    rows_.push_back(std::move(row));
    return true;
  }

  // File idx's row read from the file (its checksum first: libhdf5 can crash or hang on
  // a damaged file); false, with a skipped message, when it is left out.
  bool read_row(size_t idx) {
    const std::string rel = "runs/" + names_[idx], &path = paths_[idx];
    const std::string id = fs::path(names_[idx]).stem().string();
    const Stamp& st = stamps_[idx];
    Row row{rel, {}, {}, {}, st.size, st.mtime_ns, -1};
    try {
      Verified* v = verified_.data() != nullptr ? &verified_[idx] : nullptr;
      const bool held = v != nullptr && st.ok &&
                        std::atomic_ref<unsigned char>(v->ok).load(std::memory_order_acquire) == 1 &&
                        v->ino == st.ino && v->size == st.size && v->mtime_ns == st.mtime_ns;
      if (std::string damaged = held ? std::string() : cell_file_damage(path); !damaged.empty()) {
        result_.skipped.push_back(rel + ": " + damaged);
        return false;
      }
      h5::File f = h5::File::open_read_in_memory(path);
      std::string why;
      auto summary = read_valid_cell_summary(f, id, &why);
      if (!summary) {
        result_.skipped.push_back(rel + ": " + why);
        return false;
      }
      row.summary = std::move(*summary);
      std::map<std::string, TrajectoryInfo> found;
      for (const std::string& g : kTrajectoryGroups)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 1, row.trajectories, found, trajectories_);
      for (const std::string& g : kTrajectoryGroups3)
        if (f.is_group(g)) find_trajectories(f.open_group(g), 3, row.trajectories, found, trajectories_);
      for (const auto& [k, t] : found) {
        TrajectoryInfo& all = trajectories_[k];
        merge_shape(all.shape, t.shape);
        if (all.description.empty()) all.description = t.description;
      }
    } catch (const std::exception& e) {
      result_.skipped.push_back(rel + ": " + strip_path(e.what(), path));
      return false;
    }
    flatten(row.summary.config, "", row.params);
    if (!st.ok) row.size = row.mtime_ns = -1;  // never matches: reread next time
    rows_.push_back(std::move(row));
    return true;
  }

  // Same files, same stamps, same order, same fits, skipped files and trajectory shapes
  // as the previous aggregate.
  bool unchanged() const {
    const uint64_t cells = rows_.size();
    bool same = previous_.complete && result_.reread == 0 && previous_.index.size() == cells &&
                previous_.cells == result_.cells && previous_.version == ATTNSWEEP_VERSION &&
                previous_.skipped == result_.skipped && same_fits(previous_.fits, result_.fits) &&
                previous_.trajectory_shapes.size() == trajectories_.size();
    for (uint64_t i = 0; same && i < cells; ++i) same = rows_[i].old_row == static_cast<int64_t>(i);
    for (const auto& [name, t] : trajectories_) {
      if (!same) break;
      std::vector<uint64_t> shape{cells};
      shape.insert(shape.end(), t.shape.begin(), t.shape.end());
      auto it = previous_.trajectory_shapes.find(name);
      same = it != previous_.trajectory_shapes.end() && it->second == shape;
    }
    return same;
  }

  // aggregate.h5, written to a temporary and committed.
  void write_aggregate() {
    const std::string tmp = temp_path_for(out_path_);
    TempFileGuard guard(tmp);
    {
      h5::File f = h5::File::create(tmp);
      f.set_attribute_string("attnsweep_version", ATTNSWEEP_VERSION);
      f.set_attribute_int64("cells", result_.cells);
      {
        h5::Group g = f.require_group("/cells");
        for (const Column& c : cols_) write_column(g, c);
      }
      write_cell_groups(f);
      TrajectoryPass(root_, rows_, fork_min_, opt_, result_).run(f, trajectories_, out_path_);
      write_fits(f, result_.fits);
      if (!result_.paired.empty()) write_paired_group(f, result_.paired);
      write_best_scale_group(f, result_.best_scale);
      f.write_strings("/skipped", result_.skipped, "runs/NAME: why a result file was left out");
      write_index(f, rows_, trajectories_);
      f.close();
    }
    commit_file(tmp, out_path_);
    guard.release();
  }

  // /cell_groups: per /cells row, the group strings of its fit and its comparisons, made
  // where /fits and /paired make theirs, so that the report finds a fit's or a pair's
  // cells by these strings instead of formatting the values of /cells itself.
  void write_cell_groups(h5::File& f) const {
    h5::Group g = f.require_group("/cell_groups");
    g.write_strings("fit_group", column_of<std::string>(rows_, [](const Row& r) { return group_label(r.params); }),
                    "the /fits group of the cell (every config key but prompt_length and the replicates, k=v)");
    g.write_strings("paired_group", column_of<std::string>(rows_, [](const Row& r) { return paired_group(r.params); }),
                    "the /paired group of the cell (as fit_group, without activation, degree, scale)");
    g.write_strings("paired_spec", column_of<std::string>(rows_, [](const Row& r) { return paired_spec(r.params); }),
                    "the cell's activation as /paired a or b names it (activation=poly degree=3 scale=inv_n)");
  }

  // DIR/paired.csv and DIR/best_scale.csv when the cells hold comparisons or numeric
  // scales (a stale one goes).
  void write_analyses_csv() {
    std::error_code ec;
    const std::string paired_csv = (out_root_ / "paired.csv").string(),
                      best_csv = (out_root_ / "best_scale.csv").string();
    if (!result_.paired.empty())
      write_paired(paired_csv, result_.paired);
    else
      fs::remove(paired_csv, ec);
    if (!result_.best_scale.best.empty())
      write_best_scale(best_csv, result_.best_scale);
    else
      fs::remove(best_csv, ec);
  }

  const std::string dir_;
  const AggregateOptions& opt_;
  const fs::path root_, runs_;
  const fs::path out_root_;  // where aggregate.h5 and the CSV files go: DIR, or opt.out_dir
  const std::string out_path_;
  std::vector<std::string> names_, paths_;
  std::vector<Stamp> stamps_;
  Previous previous_;
  int64_t fork_min_ = 0;
  SharedArray<Verified> verified_;
  SharedArray<uint64_t> passed_;
  Reader verifier_;
  std::vector<Row> rows_;
  std::map<std::string, TrajectoryInfo> trajectories_;
  std::vector<Column> cols_;
  AggregateResult result_;
};

}  // namespace

AggregateResult aggregate_dir(const std::string& dir, const AggregateOptions& opt) {
  return Aggregation(dir, opt).run();
}

}  // namespace attnsweep
