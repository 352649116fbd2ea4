// The wall clock as text: the one format of times in result files, status, logs and the
// sbatch script.
#pragma once

#include <string>

namespace attnsweep {

// Now, ISO 8601 in UTC to the second: "2026-11-29T16:02:11Z".
std::string iso_utc_now();

}  // namespace attnsweep
