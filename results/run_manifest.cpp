#include "results/run_manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "base/text_file.h"

namespace attnsweep {

std::optional<std::set<std::string>> grid_cell_ids(const std::string& dir) {
  const std::string path = dir + "/manifest.json";
  if (!std::filesystem::exists(path)) return std::nullopt;
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(read_text(path));
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": unreadable manifest (" + e.what() + ")");
  }
  if (!m.is_object() || !m.contains(kManifestCellIds)) return std::nullopt;
  const nlohmann::json& ids = m[kManifestCellIds];
  std::set<std::string> out;
  if (ids.is_array())
    for (const nlohmann::json& id : ids)
      if (id.is_string()) out.insert(id.get<std::string>());
  if (!ids.is_array() || out.size() != ids.size())
    throw std::runtime_error(path + ": " + kManifestCellIds + ": expected a list of cell ids (strings)");
  return out;
}

std::set<std::string> dropped_cell_ids(const std::string& dir) {
  const std::optional<std::set<std::string>> grid = grid_cell_ids(dir);
  std::set<std::string> dropped;
  std::error_code ec;
  if (!grid) return dropped;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/cells", ec))
    if (e.path().extension() == ".json" && !grid->count(e.path().stem().string()))
      dropped.insert(e.path().stem().string());
  return dropped;
}

std::vector<std::string> result_file_names(const std::string& dir, int64_t* not_in_grid) {
  namespace fs = std::filesystem;
  const fs::path runs = fs::path(dir) / "runs";
  std::error_code ec;
  if (!fs::is_directory(runs, ec)) throw std::runtime_error(dir + ": no runs/ folder (is this a results directory?)");
  const std::set<std::string> dropped = dropped_cell_ids(dir);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(runs, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos || e.path().extension() != ".h5") continue;  // a writer's temporary
    if (dropped.count(e.path().stem().string()))
      ++*not_in_grid;
    else
      names.push_back(name);
  }
  if (ec) throw std::runtime_error(runs.string() + ": cannot list (" + ec.message() + ")");
  std::sort(names.begin(), names.end());
  return names;
}

std::string not_in_grid_note(int64_t not_in_grid, const std::string& dir) {
  return "left out " + std::to_string(not_in_grid) + " result file" + (not_in_grid == 1 ? "" : "s") +
         " of cells no longer in the grid of " + dir +
         "/manifest.json (a grid changed with run --force; the files stay in runs/)";
}

}  // namespace attnsweep
