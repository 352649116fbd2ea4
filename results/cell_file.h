// One HDF5 file per cell (docs/results-schema.md, a result file): written by the child
// that ran the cell, to a temporary name, flushed, fsync'd and renamed, so a file
// under runs/ exists only when complete.
#pragma once

#include <nlohmann/json.hpp>

#include "experiments/cell_result.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace attnsweep {
namespace h5 {
class File;
}

using json = nlohmann::json;

// Writes `path` atomically (PATH.tmp.<pid> -> fsync -> rename -> fsync dir).
// Throws std::runtime_error with the HDF5 error context on failure; leaves no file.
void write_cell_file(const std::string& path, const CellResult& result);

// The 512-byte header (an HDF5 user block) that write_cell_file puts before an HDF5
// file whose bytes are `body`: a checksum that read_cell_summary verifies before
// libhdf5 sees the file. For tests/fuzz, which checksums its own inputs.
std::string cell_file_header(const std::string& body);

// Reads the summary (experiments/cell_result.h: root attributes and /final); throws std::runtime_error naming the
// file and what is wrong. The checksum header is verified first: a damaged file never reaches libhdf5.
CellSummary read_cell_summary(const std::string& path);

// The same from a file already open (its name is the one it was opened with). The caller
// must have checked cell_file_damage() before opening it with libhdf5.
CellSummary read_cell_summary(const h5::File& f);

// Why the file at `path` must not be given to libhdf5 (a missing or damaged checksum
// header, a truncated or changed file), or "" when its checksum holds.
std::string cell_file_damage(const std::string& path);

// True when `path` is a readable result file for `expected_id` with a final status.
bool cell_file_valid(const std::string& path, const std::string& expected_id, std::string* why = nullptr);

// The summary of `path` when it is valid in cell_file_valid's sense, else nullopt with
// the reason in *why (without the path: "not an HDF5 file", "truncated file (HDF5: …)",
// "cell_id is X, expected Y", "status is running, expected complete or diverged").
// An empty expected_id accepts any cell_id. Never throws.
std::optional<CellSummary> read_valid_cell_summary(const std::string& path, const std::string& expected_id,
                                                   std::string* why);
// The same from a file already open, for a caller that reads more of it (aggregate).
std::optional<CellSummary> read_valid_cell_summary(const h5::File& f, const std::string& expected_id, std::string* why);

}  // namespace attnsweep
