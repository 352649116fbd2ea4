#include "results/run_manifest.h"

#include <nlohmann/json.hpp>

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

}  // namespace attnsweep
