// Metrics of a claim taken from a cell's trajectory rather than its /final attributes:
//   late:<dataset>:layer<k>    the mean over heads and over the last quarter of the logged
//                              rows of a [T, L, H] dataset, layer k (1-based): a norm's
//                              plateau ("late:norms/attn_fro:layer4", steps 750-1000 of 1000)
//   growth:<dataset>:layer<k>  log(mean over the last quarter / mean over the quarter
//                              before it), heads averaged first: 0 on a plateau, > 0 while
//                              the norm still grows
// `verdict` reads them from DIR/runs/<cell_id>.h5 (results/verdict_files.h); `plan`
// checks the dataset is one the task writes.
#pragma once

#include <optional>
#include <string>

#include "results/h5.h"

namespace attnsweep {

struct TrajectoryMetric {
  std::string stat;  // "late" or "growth"
  std::string path;  // "/norms/attn_fro"
  int layer = 1;     // 1-based
};

// nullopt when `name` is not of the form above (a final metric); `*problem` set when it
// starts like one but is malformed.
std::optional<TrajectoryMetric> parse_trajectory_metric(const std::string& name, std::string* problem);

// The metric of one cell file; NaN when the dataset is missing, not [T, L, H], has fewer
// than 4 rows or the layer is beyond L.
double trajectory_metric_value(const h5::File& f, const TrajectoryMetric& m);

}  // namespace attnsweep
