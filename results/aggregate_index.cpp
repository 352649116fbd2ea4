// The index of the previous aggregate (results/aggregate_index.h): reading it, restoring
// a row from it, writing it.
#include "results/aggregate_index.h"

#include <filesystem>
#include <stdexcept>
#include <utility>

namespace attnsweep::aggregation {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kIndexFormat = 1;

// The summary's JSON (experiments/cell_result.h) and "traj": [[name, path, shape, description]].
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

}  // namespace

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
      out.complete = f.is_group("/cell_groups");  // older aggregates lack it: rewritten
    } catch (const std::exception&) {
      out.complete = false;  // the index alone still saves rereading the files
    }
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

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

}  // namespace attnsweep::aggregation
