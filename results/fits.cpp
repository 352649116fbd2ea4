// The log-log fits of aggregate (results/fits.h): OLS, the Student-t quantile, the fits
// per group of cells and the /fits group.
#include "results/fits.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "experiments/result_schema.h"
#include "results/aggregate_options.h"
#include "results/aggregate_rows.h"
#include "results/table.h"

namespace attnsweep {
namespace {}  // namespace

Fit fit_loglog(const std::vector<double>& x, const std::vector<double>& y) {
  Fit f;
  f.slope = f.intercept = f.r2 = f.slope_ci95 = kNaN;
  std::vector<double> lx, ly;
  double xmin = std::numeric_limits<double>::infinity(), xmax = -xmin;
  for (size_t i = 0; i < std::min(x.size(), y.size()); ++i) {
    if (!(x[i] > 0 && y[i] > 0) || !std::isfinite(x[i]) || !std::isfinite(y[i])) continue;
    lx.push_back(std::log(x[i]));
    ly.push_back(std::log(y[i]));
    xmin = std::min(xmin, x[i]);
    xmax = std::max(xmax, x[i]);
  }
  const size_t n = lx.size();
  f.points = static_cast<int64_t>(n);
  if (n == 0) return f;
  f.n_min = std::llround(xmin);
  f.n_max = std::llround(xmax);
  double mx = 0, my = 0;
  for (size_t i = 0; i < n; ++i) {
    mx += lx[i];
    my += ly[i];
  }
  mx /= static_cast<double>(n);
  my /= static_cast<double>(n);
  double sxx = 0, sxy = 0, syy = 0;
  for (size_t i = 0; i < n; ++i) {
    sxx += (lx[i] - mx) * (lx[i] - mx);
    sxy += (lx[i] - mx) * (ly[i] - my);
    syy += (ly[i] - my) * (ly[i] - my);
  }
  if (n < 2 || !(sxx > 0)) return f;  // one distinct x: no line
  f.slope = sxy / sxx;
  f.intercept = my - f.slope * mx;
  double ss_res = 0;
  for (size_t i = 0; i < n; ++i) {
    double r = ly[i] - (f.intercept + f.slope * lx[i]);
    ss_res += r * r;
  }
  f.r2 = syy > 0 ? 1 - ss_res / syy : kNaN;
  if (n >= 3) {
    const double dof = static_cast<double>(n - 2);
    f.slope_ci95 = student_t_quantile(0.975, dof) * std::sqrt(ss_res / dof / sxx);
  }
  return f;
}

namespace aggregation {
namespace {

// What a cell file holds is declared in experiments/result_schema.cpp: the fixed
// columns, the metrics fitted against prompt_length (whichever a cell has as /final
// attributes: the norms of paper A, in-context regression's distance to the limit and
// test risk against the context length L of paper B) and the trajectory groups.
const std::vector<std::string> kFitMetrics = fitted_metrics();

bool same_number(double a, double b) {
  return a == b || (std::isnan(a) && std::isnan(b));
}

}  // namespace

std::vector<Fit> compute_fits(const std::vector<Row>& rows, const AggregateOptions& opt) {
  std::map<std::pair<std::string, std::string>, std::pair<std::vector<double>, std::vector<double>>> points;
  for (const Row& r : rows) {
    if (r.summary.status != CellStatus::complete) continue;
    auto n_it = r.params.find("prompt_length");
    if (n_it == r.params.end() || !n_it->second.is_number()) continue;
    const double n = n_it->second.get<double>();
    if (n < static_cast<double>(opt.fit_min_n) || n > static_cast<double>(opt.fit_max_n)) continue;
    const std::string group = group_label(r.params);
    for (const std::string& metric : kFitMetrics) {
      auto m = r.summary.final_metrics.find(metric);
      if (m == r.summary.final_metrics.end() || !(m->second > 0) || !std::isfinite(m->second)) continue;
      auto& [xs, ys] = points[{group, metric}];
      xs.push_back(n);
      ys.push_back(m->second);
    }
  }
  std::vector<Fit> fits;
  for (const auto& [key, xy] : points) {
    if (std::set<double>(xy.first.begin(), xy.first.end()).size() < 2) continue;
    Fit f = fit_loglog(xy.first, xy.second);
    f.group = key.first;
    f.metric = key.second;
    fits.push_back(std::move(f));
  }
  return fits;
}

void write_fits(h5::File& f, const std::vector<Fit>& fits) {
  h5::Group g = f.require_group("/fits");
  const std::vector<uint64_t> shape{fits.size()};
  g.write_strings("metric", column_of<std::string>(fits, &Fit::metric), "fitted /final metric");
  g.write_strings("group", column_of<std::string>(fits, &Fit::group),
                  "the other config parameters (all but prompt_length and seed), k=v in key order");
  g.write_dataset<double>("slope", shape, column_of<double>(fits, &Fit::slope),
                          "OLS slope of log(metric) on log(prompt_length)");
  g.write_dataset<double>("intercept", shape, column_of<double>(fits, &Fit::intercept),
                          "OLS intercept of log(metric) on log(prompt_length) (natural logs)");
  g.write_dataset<double>("r2", shape, column_of<double>(fits, &Fit::r2), "coefficient of determination");
  g.write_dataset<double>("slope_ci95", shape, column_of<double>(fits, &Fit::slope_ci95),
                          "half-width of the 95% Student-t interval of the slope (NaN below 3 points)");
  g.write_dataset<int64_t>("points", shape, column_of<int64_t>(fits, &Fit::points), "cells in the fit");
  g.write_dataset<int64_t>("n_min", shape, column_of<int64_t>(fits, &Fit::n_min), "smallest prompt_length used");
  g.write_dataset<int64_t>("n_max", shape, column_of<int64_t>(fits, &Fit::n_max), "largest prompt_length used");
}

std::vector<Fit> read_fits(const h5::File& f) {
  std::vector<Fit> fits;
  if (!f.is_group("/fits")) return fits;
  h5::Group g = f.open_group("/fits");
  auto metric = g.open_dataset("metric").read_strings(), group = g.open_dataset("group").read_strings();
  auto slope = g.open_dataset("slope").read<double>(), intercept = g.open_dataset("intercept").read<double>();
  auto r2 = g.open_dataset("r2").read<double>(), ci = g.open_dataset("slope_ci95").read<double>();
  auto points = g.open_dataset("points").read<int64_t>(), n_min = g.open_dataset("n_min").read<int64_t>();
  auto n_max = g.open_dataset("n_max").read<int64_t>();
  for (size_t i = 0; i < metric.size(); ++i) {
    if (i >= group.size() || i >= slope.size() || i >= intercept.size() || i >= r2.size() || i >= ci.size() ||
        i >= points.size() || i >= n_min.size() || i >= n_max.size())
      throw std::runtime_error("/fits: datasets of different lengths");
    fits.push_back({metric[i], group[i], slope[i], intercept[i], r2[i], ci[i], points[i], n_min[i], n_max[i]});
  }
  return fits;
}

bool same_fits(const std::vector<Fit>& a, const std::vector<Fit>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Fit &x = a[i], &y = b[i];
    if (x.metric != y.metric || x.group != y.group || !same_number(x.slope, y.slope) ||
        !same_number(x.intercept, y.intercept) || !same_number(x.r2, y.r2) ||
        !same_number(x.slope_ci95, y.slope_ci95) || x.points != y.points || x.n_min != y.n_min || x.n_max != y.n_max)
      return false;
  }
  return true;
}

}  // namespace aggregation
}  // namespace attnsweep
