#include "results/cell_file.h"

#include <functional>
#include <span>
#include <stdexcept>

#include "results/atomic_file.h"
#include "results/h5.h"

#ifndef ATTNSWEEP_VERSION
#error "ATTNSWEEP_VERSION must be defined by CMake"
#endif

namespace attnsweep {
namespace {

bool final_status(const std::string& s) { return s == "complete" || s == "diverged"; }

void check_result(const std::string& path, const CellResult& r) {
  auto bad = [&](const std::string& what) { throw std::runtime_error(path + ": " + what); };
  if (r.cell_id.empty()) bad("empty cell_id");
  if (!final_status(r.status)) bad("status \"" + r.status + "\" is neither complete nor diverged");
  for (const ResultDataset& d : r.datasets) {
    if (d.path.size() < 2 || d.path[0] != '/' || d.path.back() == '/') bad("dataset path \"" + d.path + "\" must be absolute, like /train/loss");
    uint64_t n = 1;
    for (uint64_t s : d.shape) n *= s;
    size_t have = std::visit([](const auto& v) { return v.size(); }, d.data);
    if (n != have)
      bad(d.path + ": shape holds " + std::to_string(n) + " values but the data has " + std::to_string(have));
  }
}

// "PATH: reason" -> "reason"; "PATH:/obj: reason" -> "/obj: reason".
std::string without_path(const std::string& msg, const std::string& path) {
  if (msg.rfind(path, 0) != 0) return msg;
  std::string rest = msg.substr(path.size());
  if (rest.rfind(": ", 0) == 0) return rest.substr(2);
  if (rest.rfind(":", 0) == 0) return rest.substr(1);
  return msg;
}

}  // namespace

void write_cell_file(const std::string& path, const CellResult& r) {
  check_result(path, r);
  const std::string tmp = temp_path_for(path);
  TempFileGuard guard(tmp);
  {
    h5::File f = h5::File::create(tmp);
    f.set_attribute_string("cell_id", r.cell_id);
    f.set_attribute_string("config", r.config.dump());  // std::map-ordered keys: canonical
    f.set_attribute_string("status", r.status);
    f.set_attribute_int64("diverged_at_step", r.diverged_at_step);
    f.set_attribute_string("attnsweep_version", ATTNSWEEP_VERSION);
    f.set_attribute_string("device", r.device);
    f.set_attribute_double("wall_seconds", r.wall_seconds);
    f.set_attribute_string("started", r.started);
    f.set_attribute_string("finished", r.finished);
    for (const auto& [name, value] : r.provenance) f.set_attribute_string(name, value);
    {
      h5::Group final_group = f.require_group("/final");
      for (const auto& [name, value] : r.final_metrics) final_group.set_attribute_double(name, value);
    }
    for (const ResultDataset& d : r.datasets) {
      std::visit(
          [&](const auto& v) {
            using T = typename std::decay_t<decltype(v)>::value_type;
            f.write_dataset<T>(d.path, d.shape, std::span<const T>(v), d.description);
          },
          d.data);
    }
    f.close();
  }
  commit_file(tmp, path);
  guard.release();
}

CellSummary read_cell_summary(const std::string& path) { return read_cell_summary(h5::File::open_read(path)); }

CellSummary read_cell_summary(const h5::File& f) {
  const std::string& path = f.file_name();
  CellSummary s;
  s.cell_id = f.attribute_string("cell_id");
  const std::string config = f.attribute_string("config");
  try {
    s.config = json::parse(config);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": config attribute is not JSON (" + e.what() + ")");
  }
  if (!s.config.is_object()) throw std::runtime_error(path + ": config attribute is not a JSON object");
  s.status = f.attribute_string("status");
  s.diverged_at_step = f.attribute_int64("diverged_at_step");
  s.device = f.attribute_string("device");
  s.wall_seconds = f.attribute_double("wall_seconds");
  if (!f.is_group("/final")) throw std::runtime_error(path + ": no /final group");
  h5::Group final_group = f.open_group("/final");
  for (const std::string& name : final_group.attribute_names()) s.final_metrics[name] = final_group.attribute_double(name);
  return s;
}

namespace {
std::optional<CellSummary> valid_summary(const std::string& path, const std::string& expected_id, std::string* why,
                                         const std::function<CellSummary()>& read) {
  std::string reason;
  try {
    CellSummary s = read();
    if (!expected_id.empty() && s.cell_id != expected_id)
      reason = "cell_id is " + s.cell_id + ", expected " + expected_id;
    else if (!final_status(s.status))
      reason = "status is " + s.status + ", expected complete or diverged";
    else
      return s;
  } catch (const std::exception& e) {
    reason = without_path(e.what(), path);
  } catch (...) {
    reason = "unknown error";
  }
  if (why) *why = reason;
  return std::nullopt;
}
}  // namespace

std::optional<CellSummary> read_valid_cell_summary(const std::string& path, const std::string& expected_id,
                                                   std::string* why) {
  return valid_summary(path, expected_id, why, [&] { return read_cell_summary(path); });
}

std::optional<CellSummary> read_valid_cell_summary(const h5::File& f, const std::string& expected_id,
                                                   std::string* why) {
  return valid_summary(f.file_name(), expected_id, why, [&] { return read_cell_summary(f); });
}

bool cell_file_valid(const std::string& path, const std::string& expected_id, std::string* why) {
  if (expected_id.empty()) {
    if (why) *why = "no expected cell_id given";
    return false;
  }
  return read_valid_cell_summary(path, expected_id, why).has_value();
}

}  // namespace attnsweep
