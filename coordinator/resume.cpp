#include "coordinator/resume.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>

#include "base/utc_time.h"
#include "results/cell_file.h"
#include "results/run_manifest.h"
#include "results/verdict_files.h"

namespace attnsweep {
namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<std::pair<size_t, CellStatus>> prepare_dir(const Grid& grid, const RunOptions& opt, RunDir& rd) {
  rd.open_and_lock();
  const std::string manifest = rd.dir() + "/manifest.json";
  json old;
  if (fs::exists(manifest)) {
    try {
      old = json::parse(read_text(manifest));
    } catch (const std::exception& e) {
      throw InputError({manifest + ": unreadable manifest (" + std::string(e.what()) + ")"});
    }
    const std::string old_hash = old.value("grid_hash", "");
    if (old_hash != grid.hash && !opt.force) {
      // What changed, in cells: the manifest's cell ids, else (a manifest written before
      // they were recorded) the directory's cell files.
      std::set<std::string> had, now;
      if (const auto ids = grid_cell_ids(rd.dir()))
        had = *ids;
      else if (fs::is_directory(rd.dir() + "/cells"))
        for (const auto& e : fs::directory_iterator(rd.dir() + "/cells"))
          if (e.path().extension() == ".json") had.insert(e.path().stem().string());
      for (const Cell& c : grid.cells) now.insert(c.id);
      size_t added = 0, removed = 0;
      for (const std::string& id : now) added += had.count(id) == 0;
      for (const std::string& id : had) removed += now.count(id) == 0;
      throw InputError({manifest + ": grid_hash: this directory holds a different grid (" + std::to_string(had.size()) +
                        " cells; this one has " + std::to_string(now.size()) + ": " + std::to_string(added) +
                        " added, " + std::to_string(removed) + " removed, " + std::to_string(now.size() - added) +
                        " the same); use --force to resume with the changed grid, or another --out"});
    }
  }
  std::set<std::string> ids;
  for (const Cell& c : grid.cells) ids.insert(c.id);
  json m = {{"grid", grid.source},         {"grid_file", grid.file},     {"grid_name", grid.name},
            {"grid_hash", grid.hash},      {"cells", grid.cells.size()}, {"attnsweep_version", ATTNSWEEP_VERSION},
            {"overrides", grid.overrides}, {"written", iso_utc_now()},   {kManifestCellIds, ids}};
  // When the claims were declared (results/verdict.h): kept while they stay the same, else
  // now, with how many of the grid's cells had finished by then (0: before the run).
  const json claims = grid.source.value("claims", json());
  if (!claims.is_null()) {
    const json old_grid = old.is_object() ? old.value("grid", json::object()) : json::object();
    if (old_grid.is_object() && old_grid.value("claims", json()) == claims && old.contains(kManifestClaimsDeclared)) {
      m[kManifestClaimsDeclared] = old[kManifestClaimsDeclared];
    } else {
      int64_t done = 0;
      for (const std::string& id : ids) done += fs::exists(rd.dir() + "/runs/" + id + ".h5");
      m[kManifestClaimsDeclared] = {{"written", iso_utc_now()}, {"cells_done", done}};
    }
  }
  atomic_write_text(manifest, m.dump(2) + "\n");

  // Temporaries of a run that was killed (we hold the lock: no writer is alive).
  remove_stale_temporaries(rd.dir() + "/runs");
  // Half-written checkpoints too (a killed or lost rank's); a complete one is resumed.
  remove_stale_temporaries(rd.dir() + "/checkpoints");
  std::vector<std::pair<size_t, CellStatus>> finished;
  for (size_t i = 0; i < grid.cells.size(); ++i) {
    const Cell& c = grid.cells[i];
    const std::string cell_path = rd.cell_file(c.id);
    const std::string text = c.config.dump(2) + "\n";
    bool same = false;
    if (fs::exists(cell_path)) {
      try {
        same = read_text(cell_path) == text;
      } catch (...) {
      }
    }
    if (!same) atomic_write_text(cell_path, text, /*durable=*/false);
    const std::string result = rd.runs(c.id);
    if (!opt.resume) {
      // --no-resume: every cell from its start, its checkpoint (a command cell's metrics
      // lines and attempt time too: the files named after its checkpoint) gone.
      const std::string ckpt = fs::path(rd.checkpoint(c.id)).filename().string();
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(rd.dir() + "/checkpoints", ec))
        if (e.path().filename().string().rfind(ckpt, 0) == 0) fs::remove_all(e.path(), ec);
      continue;
    }
    if (!fs::exists(result)) continue;
    std::string why;
    if (cell_file_valid(result, c.id, &why)) {
      const CellSummary s = read_cell_summary(result);
      finished.push_back({i, s.status == CellStatus::diverged ? CellStatus::diverged : CellStatus::complete});
    } else {
      // Never trust, never delete: keep the bad file aside for a post-mortem, recompute.
      const std::string aside = result + ".invalid";
      std::error_code ec;
      fs::rename(result, aside, ec);
      rd.append_event({{"event", "invalid_result"}, {"cell_id", c.id}, {"reason", why}, {"moved_to", aside}});
      std::fprintf(stderr, "attnsweep: %s: %s; moved to %s, recomputing\n", result.c_str(), why.c_str(), aside.c_str());
    }
  }
  return finished;
}

}  // namespace attnsweep
