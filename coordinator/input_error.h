// Bad input (a grid, a cell config, an override, a command line value): the error the
// CLI prints one line a problem and exits 2 for (docs/command-line.md#exit-codes). Below every reader of
// input in coordinator/ (json_text, grid, the CLI's checks).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace attnsweep {

// One line per problem, each "FILE: JSON.PATH: what was expected".
struct InputError : std::runtime_error {
  std::vector<std::string> problems;
  explicit InputError(std::vector<std::string> p);
};

}  // namespace attnsweep
