// The best scale of a scaled activation (paper A's Fig. 1: the best c of c * s^3 shrinks
// as the prompt length N grows). From cells whose `scale` is a number: per group of the
// other parameters and per N, the c with the best mean test metric over seeds, refined
// between grid points by a parabola in log c, with a bootstrap interval over seeds; and
// the least-squares slope of log c* against log N with its bootstrap interval (paper A's
// 1/sqrt(N) scaling predicts -1/2).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "results/h5.h"
#include "results/table.h"

namespace attnsweep {

struct BestScale {
  std::string metric;    // test_accuracy (maximised), test_loss or test_mse (minimised)
  std::string group;     // the other parameters but scale, prompt_length and the seeds, k=v
  double prompt_length;  // N
  double c_star;         // the best scale (parabola vertex in log c when interior, else the grid point)
  double c_lo, c_hi;     // 95% bootstrap interval over seeds (2.5 and 97.5 percentiles)
  bool at_edge;          // the best mean is at the smallest or largest scale of the grid
  int64_t scales = 0;    // distinct scales at this N
  int64_t seeds = 0;     // replicates per scale (the fewest)
};

struct BestScaleFit {
  std::string metric, group;
  double slope, intercept;    // OLS of log c* on log N
  double slope_lo, slope_hi;  // 95% bootstrap interval (seeds resampled at every N)
  int64_t points = 0;         // prompt lengths in the fit
};

struct BestScaleResult {
  std::vector<BestScale> best;  // sorted by metric, group, prompt_length
  std::vector<BestScaleFit> fits;
};

// Cells without a
// numeric scale, or without one of the metrics, take no part.
BestScaleResult best_scales(const std::vector<CellRow>& cells);

// DIR/best_scale.csv and aggregate.h5 /best_scale (+ /best_scale_fit).
void write_best_scale(const std::string& csv_path, const BestScaleResult& r);
void write_best_scale_group(h5::File& f, const BestScaleResult& r);

}  // namespace attnsweep
