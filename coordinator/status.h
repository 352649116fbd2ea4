// `attnsweep status DIR`: what a sweep has done, while it runs and after.
#pragma once

#include <string>

namespace attnsweep {

// Prints the status (text or one JSON object); returns the exit code (0).
// Throws std::runtime_error when DIR is not a results directory.
int print_status(const std::string& dir, bool as_json);

}  // namespace attnsweep
