// The run directory's manifest (DIR/manifest.json, written by `run`: coordinator/resume.cpp)
// as the readers of results see it: which cells the grid of the last `run` holds. A grid
// changed with `run --force` leaves the dropped cells' result files in runs/ (nothing is
// deleted); `status`, `aggregate` and so `report` count only the grid's cells.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace attnsweep {

// The manifest's key of the grid's cell ids (sorted).
inline constexpr const char* kManifestCellIds = "cell_ids";

// The ids of DIR's grid; nullopt when DIR has no manifest, or one written before the ids
// were recorded (then every result file counts, as before). Throws std::runtime_error
// naming the file when the manifest is not JSON or its cell_ids are not a list of strings.
std::optional<std::set<std::string>> grid_cell_ids(const std::string& dir);

// The cells DIR held (DIR/cells/<id>.json) that its grid no longer holds: their result
// files stay in runs/ but are not counted. Empty without cell_ids (an older manifest). A
// file in runs/ that names no cell DIR held is no result of this directory: readers
// still look at it (aggregate names it skipped).
std::set<std::string> dropped_cell_ids(const std::string& dir);

// The result files a reader of DIR reads: the names of DIR/runs/*.h5, sorted, but writers'
// temporaries (CELL.h5.tmp.PID) and the files of dropped cells, which it counts in
// *not_in_grid. Throws std::runtime_error naming DIR without a runs/ folder, or runs/ when
// it cannot be listed. `aggregate` and `export` read the same files.
std::vector<std::string> result_file_names(const std::string& dir, int64_t* not_in_grid);

// What a reader says when it left out files of dropped cells: "left out 3 result files of
// cells no longer in the grid of DIR/manifest.json (...)".
std::string not_in_grid_note(int64_t not_in_grid, const std::string& dir);

}  // namespace attnsweep
