// libFuzzer target: parse_grid on arbitrary bytes, then everything a run does with the
// grid it returns (cells, effective configs, ids, hash). An InputError is the expected
// answer to bad input; any other exception, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "coordinator/grid.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    attnsweep::Grid g = attnsweep::parse_grid(text, "fuzz.json");
    // Expansion is done by parse_grid; use its results the way the coordinator does.
    for (const auto& c : g.cells) {
      if (c.id.size() != 16 || c.id != attnsweep::cell_id(c.config)) {
        std::fprintf(stderr, "cell id mismatch: %s\n", c.id.c_str());
        std::abort();
      }
      // A cell's effective config is a valid cell file (`attnsweep train`) of the same id.
      attnsweep::json again;
      try {
        again = attnsweep::effective_config(c.config, "cell.json");
      } catch (const attnsweep::InputError& e) {
        std::fprintf(stderr, "effective config of cell %s rejected: %s\n", c.id.c_str(), e.what());
        std::abort();
      }
      if (attnsweep::cell_id(again) != c.id) {
        std::fprintf(stderr, "effective config of cell %s not stable\n", c.id.c_str());
        std::abort();
      }
    }
  } catch (const attnsweep::InputError& e) {
    if (e.problems.empty()) {
      std::fprintf(stderr, "InputError without problems\n");
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    std::abort();
  }
  return 0;
}
