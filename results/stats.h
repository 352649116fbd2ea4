// The small statistics every analysis of results shares: percentiles of bootstrap draws,
// the least-squares slope, and the best point of a scanned parameter refined by a
// parabola (results/best_scale.h, results/verdict.h).
#pragma once

#include <cstddef>
#include <vector>

namespace attnsweep {

// The p-quantile (0..1) of the finite values of `v`, linear between order statistics;
// NaN when none is finite.
double percentile(std::vector<double> v, double p);

// The OLS slope of y on x (NaN when x does not vary); `intercept` when asked.
double ols_slope(const std::vector<double>& x, const std::vector<double>& y, double* intercept = nullptr);

// The best x from means `ys` (larger better) at ascending `xs`: the vertex of the
// parabola through the best point and its two neighbours (kept between them), or the
// best point itself at either end of the grid (`at_edge` then true).
double best_log_c(const std::vector<double>& xs, const std::vector<double>& ys, bool* at_edge);

// The p-quantile of Student's t with `dof` degrees of freedom (NaN outside 0 < p < 1).
double student_t_quantile(double p, double dof);

// The factor that widens a 95 % percentile bootstrap interval over n units (each arm,
// from the estimate) for small n: sqrt(n / (n - 1)) * t(0.975, n - 1) / z(0.975). A
// resample's spread is the plug-in sd (divided by n, not n - 1) and its percentiles are
// normal ones, so with 3 units a plain percentile interval covers far less than 95 %;
// widened, the interval of a mean of normal units is the Student-t interval (2.69 at
// n = 3, 1.25 at n = 9, 1.08 at n = 30, -> 1).
double small_sample_widening(size_t n);

}  // namespace attnsweep
