#include "worker/training/progress.h"

#include <cmath>
#include <cstdio>
#include <exception>

#include "base/atomic_file.h"
#include "base/text_file.h"
#include "base/utc_time.h"

namespace attnsweep {

json to_json(const CellProgress& p) {
  return {{"cell_id", p.cell_id},
          {"attempt", p.attempt},
          {"step", p.step},
          {"steps", p.steps},
          {"first_step", p.first_step},
          {"loss", std::isfinite(p.loss) ? json(p.loss) : json(nullptr)},
          {"steps_per_s", p.steps_per_s},
          {"updated", p.updated}};
}

std::optional<CellProgress> read_progress(const std::string& path) {
  try {
    const json j = json::parse(read_text(path));
    CellProgress p;
    p.cell_id = j.at("cell_id").get<std::string>();
    p.attempt = j.at("attempt").get<int>();
    p.step = j.at("step").get<int64_t>();
    p.steps = j.at("steps").get<int64_t>();
    p.first_step = j.value("first_step", int64_t{0});
    p.loss = j.at("loss").is_number() ? j.at("loss").get<double>() : std::nan("");
    p.steps_per_s = j.at("steps_per_s").get<double>();
    p.updated = j.value("updated", std::string());
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string step_text(int64_t step, int64_t steps) {
  char buf[48];
  if (steps > 0)
    std::snprintf(buf, sizeof buf, "%lld/%lld", static_cast<long long>(step), static_cast<long long>(steps));
  else
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(step));
  return buf;
}

std::string progress_line(const CellProgress& p) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "attnsweep progress: cell %s step %s, loss %.4g, %.3g steps/s", p.cell_id.c_str(),
                step_text(p.step, p.steps).c_str(), p.loss, p.steps_per_s);
  return buf;
}

ProgressReporter::ProgressReporter(std::string cell_id, int attempt, std::string path) : path_(std::move(path)) {
  p_.cell_id = std::move(cell_id);
  p_.attempt = attempt;
}

void ProgressReporter::operator()(int64_t step, int64_t steps, double loss) {
  const Clock::time_point now = Clock::now();
  if (!started_) {  // the first step done: the rate counts from here (data loading excluded)
    started_ = true;
    p_.first_step = step - 1;
    t_first_ = t_last_ = now;
  }
  if (std::chrono::duration<double>(now - t_last_).count() < (reported_ ? kEveryS : 1.0)) return;
  t_last_ = now;
  reported_ = true;
  p_.step = step;
  p_.steps = steps;
  p_.loss = loss;
  const double s = std::chrono::duration<double>(now - t_first_).count();
  p_.steps_per_s = s > 0 ? static_cast<double>(step - 1 - p_.first_step) / s : 0.0;
  p_.updated = iso_utc_now();
  std::fprintf(stderr, "%s\n", progress_line(p_).c_str());
  if (path_.empty()) return;
  try {
    atomic_write_text(path_, to_json(p_).dump() + "\n", /*durable=*/false);
  } catch (const std::exception& e) {  // progress is a courtesy: training goes on
    std::fprintf(stderr, "attnsweep progress: %s\n", e.what());
    path_.clear();
  }
}

}  // namespace attnsweep
