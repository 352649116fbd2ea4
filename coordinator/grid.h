// Grid files: parsing, validation (every key, with did-you-mean), expansion into
// cells (product of axes + include - exclude), effective configs, stable cell ids.
#pragma once

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>
#include <vector>

#include "base/errors.h"
#include "experiments/params.h"
#include "results/claims.h"

namespace attnsweep {

using json = nlohmann::json;

// Cells sharing one GPU (resources.cells_per_gpu, run --cells-per-gpu): 1..64.
constexpr int kMaxCellsPerGpu = 64;

// Cells trained as one in a child process (resources.fuse, run --fuse): 1..64.
constexpr int kMaxFuse = 64;

struct Resources {
  int gpus_per_cell = 1;
  double timeout_s = 0;       // 0: no timeout
  int retries = -1;           // -1: not given in the grid (the CLI default applies)
  double rank_timeout_s = 0;  // 0: not given (the CLI's, else 180 s): a rank silent this long is lost
  int cells_per_gpu = 1;      // K cells (child processes) share each GPU; ignored on CPU slots
  double gpu_memory_gib = 0;  // memory of one GPU that K cells must fit in (0: the visible GPU's)
  int fuse = 0;               // cells per group (coordinator/fusion.h); 0: not given (the task's default)
  double cost_s = -1;         // a cell's declared CPU-slot seconds (-1: not given; plan's own estimate)
};

struct Cell {
  std::string id;         // 16 hex digits, content hash of canonical(config)
  json config;            // effective config: defaults + fixed + cell values, non-applying keys dropped
  double est_cost_s = 0;  // estimate_cost_s(config)
};

struct Grid {
  std::string file;
  std::string name;
  json source;  // the grid as given
  Resources resources;
  std::vector<Cell> cells;             // in expansion order, duplicates merged
  std::string hash;                    // hash over the sorted cell ids (independent of formatting)
  std::vector<std::string> overrides;  // the command line's key=value words, as given
  std::vector<Claim> claims;           // declared in the grid (`claims`), each testable by its cells
};

Grid load_grid(const std::string& path);  // throws InputError
// The grid file with the command line's overrides after it (Hydra's words): `key=value`
// sets fixed.key (and drops key from axes), `key=a,b,c` makes key an axis of those values
// (and drops it from fixed), `resources.key=value` sets a resource; a leading `+` is
// allowed. A value is JSON where it parses as JSON (numbers, true, "text", [1, 2]), else
// the bare text. The result is validated like the file. Throws InputError.
Grid load_grid(const std::string& path, const std::vector<std::string>& overrides);
// What is valid but likely a mistake (plan and run print these, one a line, and go on):
// cells whose warmup_steps exceed their steps, so the learning rate never leaves warm-up.
std::vector<std::string> grid_warnings(const Grid& grid);
// The keys whose value differs between the grid's cells (a key only some cells have
// counts: degree beside softmax cells), in the configs' sorted order: what tells one cell
// from another. `plan` lists them per cell and the others once; run's failure lines,
// status.json's failed cells (and so `status` and the report) name a cell by them.
std::vector<std::string> swept_keys(const Grid& grid);
// A cell's values of `keys` ({"activation": "poly", "seed": 1}; a key it lacks is left out).
json swept_values(const json& config, const std::vector<std::string>& keys);
// The same as one line, "activation=poly seed=1" (values as format_value writes them).
std::string swept_text(const json& config, const std::vector<std::string>& keys);
// A value as one types it in an override: text bare, anything else as JSON.
std::string format_value(const json& v);
// The grid file's text with the overrides applied (what submit copies for its job).
std::string grid_text_with_overrides(const std::string& path, const std::vector<std::string>& overrides);
Grid parse_grid(const std::string& text, const std::string& file_label);  // throws InputError

// A single cell file (`attnsweep train CELL.json`): validated like a grid cell,
// returns the effective config. Throws InputError.
json load_cell_config(const std::string& path);
json effective_config(const json& cell_values, const std::string& file_label);

// Canonical JSON text (sorted keys, canonical numbers, no whitespace) and its id.
std::string canonical_json(const json& config);
std::string cell_id(const json& config);

// The grid format as a JSON Schema (draft 2020-12), generated from the parameter table
// (experiments/params.cpp), the activation registry and the resources: every key with
// its type, range and allowed values; unknown keys are errors. `attnsweep schema`
// prints it; docs/grid-schema.json is its output. Cross-key rules (a prompt length a
// task cannot make, which keys apply to which task: said in each key's description)
// are left to `attnsweep plan`.
json grid_json_schema();

// The grid-level keys of `resources` (gpus_per_cell, timeout_s, retries, rank_timeout_s,
// cells_per_gpu, gpu_memory_gib, fuse), validated with the cell keys' machinery (experiments/params.h).
const std::vector<ParamSpec>& resource_specs();

}  // namespace attnsweep
