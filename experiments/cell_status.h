// A cell's status and its names: what a task returns, what a result file's `status`
// attribute holds, what the scheduler tracks and what status.json and the MPI messages
// say. The one place a status is named; the names are part of the file formats
// (docs/results-schema.md) and must not change.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

namespace attnsweep {

enum class CellStatus {
  pending,      // not started, or waiting for a retry (scheduler)
  running,      // an attempt is running (scheduler)
  complete,     // finished: a result file holds it
  diverged,     // finished with a non-finite loss or norm: a result file holds it too
  failed,       // an attempt crashed or timed out; for good once its retries are spent
  interrupted,  // stopped by a signal (a training cell left its checkpoint): run again
};

inline constexpr std::array<std::string_view, 6> kCellStatusNames = {"pending",  "running", "complete",
                                                                     "diverged", "failed",  "interrupted"};
// Adding a status without its name does not compile.
static_assert(kCellStatusNames.size() == static_cast<size_t>(CellStatus::interrupted) + 1);
inline constexpr size_t kCellStatusCount = kCellStatusNames.size();

constexpr std::string_view to_string(CellStatus s) {
  return kCellStatusNames[static_cast<size_t>(s)];
}

// nullopt for a text that names no status.
constexpr std::optional<CellStatus> cell_status_from_string(std::string_view text) {
  for (size_t i = 0; i < kCellStatusCount; ++i)
    if (kCellStatusNames[i] == text) return static_cast<CellStatus>(i);
  return std::nullopt;
}

// The statuses a result file may hold: the cell is done and is not run again.
constexpr bool is_final(CellStatus s) {
  return s == CellStatus::complete || s == CellStatus::diverged;
}

}  // namespace attnsweep
