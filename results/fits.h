// The log-log fits of `attnsweep aggregate`: ordinary least squares of log(metric) on
// log(prompt_length) with the Student-t interval of the slope (Boost.Math), the fits of
// every group of cells, and the /fits group of aggregate.h5.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "results/h5.h"
#include "results/stats.h"  // student_t_quantile

namespace attnsweep {

struct AggregateOptions;  // results/aggregate_options.h

struct Fit {
  std::string metric;                       // attn_fro, jac_fro, ...
  std::string group;                        // "activation=poly degree=3 scale=inv_sqrt_n task=norm_probe"
  double slope = 0, intercept = 0, r2 = 0;  // NaN when fewer than 2 distinct x; r2 NaN for constant y
  double slope_ci95 = 0;                    // half-width of the 95% Student-t interval (NaN below 3 points)
  int64_t points = 0;                       // cells in the fit
  int64_t n_min = 0, n_max = 0;             // prompt_length range used
};

// Ordinary least squares of log(y) on log(x) (points with x, y > 0).
Fit fit_loglog(const std::vector<double>& x, const std::vector<double>& y);

// Quantile of Student's t distribution with `dof` degrees of freedom (0 < p < 1).

namespace aggregation {

struct Row;  // results/aggregate_rows.h

// Fits of each metric against prompt_length per group of the other parameters.
std::vector<Fit> compute_fits(const std::vector<Row>& rows, const AggregateOptions& opt);

// /fits of aggregate.h5: one dataset per field of Fit, one row per fit.
void write_fits(h5::File& f, const std::vector<Fit>& fits);
// What write_fits wrote (none without /fits); throws when its datasets disagree in length.
std::vector<Fit> read_fits(const h5::File& f);
// The same fits field by field, NaN equal to NaN.
bool same_fits(const std::vector<Fit>& a, const std::vector<Fit>& b);

}  // namespace aggregation
}  // namespace attnsweep
