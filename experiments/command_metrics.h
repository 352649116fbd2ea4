// The metrics lines of a command cell's program (docs/own-code.md): one JSON object a line
// appended to $ATTNSWEEP_METRICS, read as the program runs (MetricsTail: the first
// malformed line stops the cell) and after it exits (read_metrics: the cell's result).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "experiments/task.h"

namespace attnsweep {

// A name of letters, digits and _, not starting with a digit: a declared key, a part of a
// metric's name.
bool is_identifier(const std::string& s);

// One record a logged step, the last of a step winning (a resumed program logs again the
// steps after its checkpoint), and the final record.
struct Metrics {
  std::map<int64_t, std::map<std::string, double>> steps;
  std::optional<std::map<std::string, double>> final;
};

// One metrics line into m (its step's record, or the final record); a blank line is
// skipped. Throws DeterministicError naming `where` (FILE:LINE) on a malformed line.
void read_metrics_line(const std::string& line, const std::string& where, Metrics& m);

// Every line of a finished program's metrics file.
Metrics read_metrics(const std::string& path);

// The cell's result: the final record and the steps as /train/<name> series.
TaskOutput output_of(const Metrics& m);

// The program's metrics lines as it runs: each complete line appended since the last look
// checked as read_metrics checks it (so a malformed line stops the cell at once, not after
// the whole run), and the last one with a step and a loss told to ctx.report_progress (the
// cell's `steps`, when it has that key, as its total).
class MetricsTail {
 public:
  MetricsTail(std::string path, const json& config)
      : path_(std::move(path)),
        steps_(config.contains("steps") && config["steps"].is_number_integer() ? config["steps"].get<int64_t>() : 0) {}
  // "" while every line is well formed, else the first problem (FILE:LINE: why).
  std::string look(const TaskContext& ctx) {
    std::ifstream f(path_, std::ios::binary);
    if (!f || !f.seekg(offset_)) return "";
    std::string line;
    int64_t step = -1;
    double loss = 0;
    while (std::getline(f, line) && !f.eof()) {  // complete lines only: the last may be half-written
      offset_ += static_cast<std::streamoff>(line.size() + 1);
      ++lineno_;
      Metrics one;
      try {
        read_metrics_line(line, path_ + ":" + std::to_string(lineno_), one);
      } catch (const DeterministicError& e) {
        return e.what();
      }
      if (!one.steps.empty()) {
        const auto& [s, values] = *one.steps.begin();
        if (auto it = values.find("loss"); it != values.end() && std::isfinite(it->second)) step = s, loss = it->second;
      }
    }
    if (step >= 0) ctx.report_progress(step + 1, steps_, loss);
    return "";
  }

 private:
  std::string path_;
  int64_t steps_;
  std::streamoff offset_ = 0;
  int64_t lineno_ = 0;
};

}  // namespace attnsweep
