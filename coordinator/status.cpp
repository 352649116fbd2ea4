#include "coordinator/status.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>

#include "coordinator/grid.h"
#include "coordinator/rundir.h"
#include "results/cell_file.h"
#include "results/run_manifest.h"
#include "worker/training/progress.h"

namespace attnsweep {

namespace fs = std::filesystem;

namespace {

// True when a run holds DIR's lock right now.
bool run_active(const std::string& dir) {
  const int fd = ::open((dir + "/run.lock").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool busy = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return busy;
}

std::string tail_lines(const std::string& path, int n) {
  std::string text;
  try {
    text = read_text(path);
  } catch (...) {
    return "";
  }
  size_t pos = text.size();
  while (pos > 0 && text[pos - 1] == '\n') --pos;
  int seen = 0;
  size_t start = pos;
  while (start > 0) {
    if (text[start - 1] == '\n' && ++seen == n) break;
    --start;
  }
  return text.substr(start, pos - start);
}

// " (activation=poly seed=1)": a cell's swept keys (coordinator/grid.h swept_values), "" without.
std::string swept_words(const json& entry) {
  std::string words;
  if (entry.contains("swept") && entry["swept"].is_object())
    for (const auto& [k, v] : entry["swept"].items()) words += (words.empty() ? "" : " ") + k + "=" + format_value(v);
  return words.empty() ? "" : " (" + words + ")";
}

// 4 significant digits, as the log's progress line.
std::string fmt_number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

// H:MM:SS.
std::string duration_text(double s) {
  const long long t = std::llround(std::max(0.0, s));
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", t / 3600, (t / 60) % 60, t % 60);
  return buf;
}

}  // namespace

int print_status(const std::string& dir, bool as_json) {
  const std::string manifest_path = dir + "/manifest.json";
  if (!fs::exists(manifest_path)) throw std::runtime_error(dir + ": no manifest.json (is this a results directory?)");
  const json manifest = json::parse(read_text(manifest_path));
  const size_t total = manifest.value("cells", size_t{0});

  // The files are the truth for finished cells; status.json adds what only the run knows.
  // Only the cells of the manifest's grid: a grid shrunk with run --force leaves the
  // dropped cells' files in runs/ (results/run_manifest.h).
  const std::set<std::string> dropped = dropped_cell_ids(dir);
  size_t complete = 0, diverged = 0, not_in_grid = 0;
  std::set<std::string> done_ids;
  for (const auto& e : fs::directory_iterator(dir + "/runs")) {
    if (e.path().extension() != ".h5") continue;
    if (dropped.count(e.path().stem().string())) {
      ++not_in_grid;
      continue;
    }
    try {
      const CellSummary s = read_cell_summary(e.path().string());
      (s.status == CellStatus::diverged ? diverged : complete)++;
      done_ids.insert(s.cell_id);
    } catch (...) {
    }
  }
  json st = json::object();
  if (fs::exists(dir + "/status.json")) {
    try {
      st = json::parse(read_text(dir + "/status.json"));
    } catch (...) {
    }
  }
  const bool active = run_active(dir);
  std::string state = active ? "running" : st.value("state", std::string("not started"));
  if (!active && state == "running") state = "stopped (the run ended without finishing: rerun to resume)";
  json failed = json::array();
  if (st.contains("failed_cells"))
    for (const json& f : st["failed_cells"])
      if (!done_ids.count(f.value("cell_id", ""))) failed.push_back(f);
  const size_t running = active ? st.value("running", size_t{0}) : 0;
  const size_t finished = complete + diverged + failed.size();
  const size_t pending = total > finished + running ? total - finished - running : 0;

  json out = {{"dir", dir},
              {"grid", manifest.value("grid_name", std::string())},
              {"state", state},
              {"total", total},
              {"complete", complete},
              {"diverged", diverged},
              {"failed", failed.size()},
              {"running", running},
              {"pending", pending},
              {"rate_cells_per_s", st.value("rate_cells_per_s", 0.0)},
              {"eta_s", active && st.contains("eta_s") ? st["eta_s"] : json(nullptr)},
              {"running_cells", active && st.contains("running_cells") ? st["running_cells"] : json::array()},
              {"failed_cells", failed},
              {"lost_ranks", st.contains("lost_ranks") ? st["lost_ranks"] : json::array()},
              {"results_not_in_grid", not_in_grid}};
  // What status.json holds of the run itself, passed on as it is (docs/command-line.md:
  // --json adds to status.json, never leaves out).
  for (const char* k :
       {"started", "updated", "elapsed_s", "elapsed_total_s", "host", "pid", "ranks", "done_before_this_run"})
    if (st.contains(k)) out[k] = st[k];
  if (as_json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s: grid %s, %s\n", dir.c_str(), out["grid"].get<std::string>().c_str(), state.c_str());
  if (out.contains("elapsed_total_s") || out.contains("elapsed_s")) {
    const double all = out.value("elapsed_total_s", out.value("elapsed_s", 0.0)), now = out.value("elapsed_s", 0.0);
    std::printf("  elapsed %s over every run of this directory (the last run: %s, started %s)\n",
                duration_text(all).c_str(), duration_text(now).c_str(), out.value("started", std::string("?")).c_str());
  }
  std::printf("  %zu cells: %zu complete, %zu diverged, %zu failed, %zu running, %zu pending\n", total, complete,
              diverged, failed.size(), running, pending);
  if (not_in_grid > 0)
    std::printf("  %zu result file%s in runs/ of cells no longer in the grid (changed with run --force): not counted\n",
                not_in_grid, not_in_grid == 1 ? "" : "s");
  if (active) {
    const json eta = out["eta_s"];
    std::printf("  %.2f cells/s, ETA %s\n", out["rate_cells_per_s"].get<double>(),
                eta.is_number() ? (std::to_string(std::lround(eta.get<double>())) + " s").c_str() : "?");
  }
  // Each running cell's last progress (worker/training/progress.h): its step, loss and rate.
  for (const json& r : out["running_cells"]) {
    std::printf("  running %s%s", r.value("cell_id", std::string("?")).c_str(), swept_words(r).c_str());
    if (r.contains("step") && r.contains("steps")) {
      const json& loss = r["loss"];
      std::printf(": step %s, loss %s, %.3g steps/s",
                  step_text(r["step"].get<int64_t>(), r["steps"].get<int64_t>()).c_str(),
                  loss.is_number() ? fmt_number(loss.get<double>()).c_str() : "nan", r.value("steps_per_s", 0.0));
    } else {
      std::printf(": no step reported yet");
    }
    const int attempt = r.value("attempt", 1);
    std::printf("%s\n", attempt > 1 ? (" (attempt " + std::to_string(attempt) + ")").c_str() : "");
  }
  // Ranks the last run stopped hearing from (heartbeats, docs/lost-ranks.md).
  for (const json& l : out["lost_ranks"])
    std::printf("  lost rank %d on host %s: silent for %.1f s, %zu cell%s reassigned\n", l.value("rank", -1),
                l.value("host", std::string("?")).c_str(), l.value("silent_s", 0.0),
                l.value("cells_reassigned", json::array()).size(),
                l.value("cells_reassigned", json::array()).size() == 1 ? "" : "s");
  for (const json& f : failed) {
    const std::string id = f.value("cell_id", "");
    std::printf("  failed %s%s: %s\n", id.c_str(), swept_words(f).c_str(), f.value("reason", "").c_str());
    const std::string tail = tail_lines(dir + "/logs/" + id + ".log", 3);
    if (!tail.empty()) {
      size_t p = 0;
      while (p < tail.size()) {
        size_t q = tail.find('\n', p);
        if (q == std::string::npos) q = tail.size();
        std::printf("    | %s\n", tail.substr(p, q - p).c_str());
        p = q + 1;
      }
    }
  }
  return 0;
}

}  // namespace attnsweep
