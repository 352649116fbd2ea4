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
