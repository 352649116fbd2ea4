#include "experiments/cell_result.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace attnsweep {

void to_json(json& j, const CellSummary& s) {
  json metrics = json::object();
  for (const auto& [k, v] : s.final_metrics) metrics[k] = std::isfinite(v) ? json(v) : json(nullptr);
  j = {{"cell_id", s.cell_id},
       {"config", s.config},
       {"status", std::string(to_string(s.status))},
       {"diverged_at_step", s.diverged_at_step},
       {"device", s.device},
       {"wall_seconds", s.wall_seconds},
       {"final", metrics}};
}

void from_json(const json& j, CellSummary& s) {
  s.cell_id = j.at("cell_id").get<std::string>();
  s.config = j.at("config");
  const std::string status = j.at("status").get<std::string>();
  const std::optional<CellStatus> st = cell_status_from_string(status);
  if (!st) throw std::runtime_error("status \"" + status + "\" names no cell status");
  s.status = *st;
  s.diverged_at_step = j.at("diverged_at_step").get<int64_t>();
  s.device = j.at("device").get<std::string>();
  s.wall_seconds = j.at("wall_seconds").get<double>();
  s.final_metrics.clear();
  for (const auto& [k, v] : j.at("final").items())
    s.final_metrics[k] = v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>();
}

}  // namespace attnsweep
