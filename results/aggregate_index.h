// The index of the previous aggregate (/index in aggregate.h5): one entry per row, the
// file's name, size and mtime and the row's summary as JSON, so that an unchanged file
// is neither reopened nor reread (its row and trajectories are copied from the previous
// aggregate.h5); and what an unchanged rerun compares against to write nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/aggregate_rows.h"
#include "results/fits.h"
#include "results/h5.h"

namespace attnsweep::aggregation {

struct IndexEntry {
  int64_t size = 0, mtime_ns = 0, row = 0;
  std::string json_text;
};

// What the previous aggregate.h5 holds: its index (empty when there is none or it
// cannot be read) and what an unchanged rerun compares against to write nothing.
struct Previous {
  std::map<std::string, IndexEntry> index;
  bool complete = false;  // everything below was read
  int64_t cells = -1;
  std::string version;
  std::vector<std::string> skipped;
  std::vector<Fit> fits;
  std::map<std::string, std::vector<uint64_t>> trajectory_shapes;  // [cells, ...]
};

// Reads PATH's index and the rest of Previous; an empty index when there is no
// PATH, it has no /index of this format, or it cannot be read.
Previous read_previous(const std::string& path);

// Restores a row from its index entry; false when the entry does not parse.
bool row_from_index(const IndexEntry& e, Row& row, std::map<std::string, TrajectoryInfo>& info);

// Writes /index: one entry per row of /cells, in their order.
void write_index(h5::File& f, const std::vector<Row>& rows, const std::map<std::string, TrajectoryInfo>& info);

}  // namespace attnsweep::aggregation
