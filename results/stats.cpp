#include "results/stats.h"

#include <boost/math/distributions/students_t.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnsweep {

double best_log_c(const std::vector<double>& xs, const std::vector<double>& ys, bool* at_edge) {
  size_t i = 0;
  for (size_t j = 1; j < ys.size(); ++j)
    if (ys[j] > ys[i]) i = j;
  *at_edge = i == 0 || i + 1 == ys.size();
  if (*at_edge) return xs[i];
  const double x0 = xs[i - 1], x1 = xs[i], x2 = xs[i + 1], y0 = ys[i - 1], y1 = ys[i], y2 = ys[i + 1];
  // vertex of the interpolating parabola (Lagrange form)
  const double num = (x1 - x0) * (x1 - x0) * (y1 - y2) - (x1 - x2) * (x1 - x2) * (y1 - y0);
  const double den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0);
  if (!(std::abs(den) > 0)) return x1;
  return std::clamp(x1 - 0.5 * num / den, x0, x2);
}

double percentile(std::vector<double> v, double p) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

double ols_slope(const std::vector<double>& x, const std::vector<double>& y, double* intercept) {
  const double n = static_cast<double>(x.size());
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
  }
  const double slope = sxx > 0 ? sxy / sxx : std::numeric_limits<double>::quiet_NaN();
  if (intercept != nullptr) *intercept = my - slope * mx;
  return slope;
}

double student_t_quantile(double p, double dof) {
  if (!(p > 0 && p < 1) || !(dof > 0)) return std::numeric_limits<double>::quiet_NaN();
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
}

double small_sample_widening(size_t n) {
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double k = static_cast<double>(n);
  return std::sqrt(k / (k - 1)) * student_t_quantile(0.975, k - 1) / 1.959963984540054;
}

}  // namespace attnsweep
