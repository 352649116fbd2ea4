#include "results/best_scale.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <tuple>

#include "results/stats.h"
#include "results/table.h"

namespace attnsweep {
namespace {
constexpr int kDraws = 2000;  // bootstrap resamples: percentiles at 2.5 % move by < 1 % of the interval

// The metrics a best scale is chosen by, and whether larger is better.
const std::vector<std::pair<std::string, bool>> kTargets = {
    {"test_accuracy", true}, {"test_loss", false}, {"test_mse", false}};

}  // namespace

BestScaleResult best_scales(const std::vector<CellRow>& cells) {
  // (metric, group) -> N -> log c -> values over seeds
  using PerScale = std::map<double, std::vector<double>>;
  std::map<std::pair<std::string, std::string>, std::map<double, PerScale>> data;
  std::map<double, double> scale_of;  // log c -> c
  for (const CellRow& c : cells) {
    if (!c.complete) continue;
    auto s = c.params.find("scale");
    auto n = c.params.find("prompt_length");
    if (s == c.params.end() || !s->second.is_number() || n == c.params.end() || !n->second.is_number()) continue;
    const double scale = s->second.get<double>(), length = n->second.get<double>();
    if (!(scale > 0) || !(length > 0)) continue;
    scale_of[std::log(scale)] = scale;
    const std::string group = group_label(c.params, [](const std::string& k) { return k == "scale"; });
    for (const auto& [metric, larger] : kTargets) {
      auto m = c.metrics.find(metric);
      if (m == c.metrics.end() || !std::isfinite(m->second)) continue;
      data[{metric, group}][length][std::log(scale)].push_back(larger ? m->second : -m->second);
    }
  }
  BestScaleResult out;
  for (const auto& [key, per_n] : data) {
    // One generator per (metric, group), seeded from nothing but the data's shape: the
    // same cells give the same intervals on every run.
    std::mt19937_64 rng(0x5ca1eULL + std::hash<std::string>{}(key.first + "\n" + key.second));
    std::vector<double> log_n, log_c;
    std::vector<std::vector<double>> draws_of_n;  // [N][draw] log c*
    for (const auto& [length, per_c] : per_n) {
      if (per_c.size() < 2) continue;
      std::vector<double> xs, means;
      int64_t fewest = INT64_MAX;
      for (const auto& [x, v] : per_c) {
        xs.push_back(x);
        double sum = 0;
        for (double y : v) sum += y;
        means.push_back(sum / static_cast<double>(v.size()));
        fewest = std::min<int64_t>(fewest, static_cast<int64_t>(v.size()));
      }
      BestScale b;
      b.metric = key.first;
      b.group = key.second;
      b.prompt_length = length;
      const double x_star = best_log_c(xs, means, &b.at_edge);
      b.c_star = b.at_edge ? scale_of.at(x_star) : std::exp(x_star);  // a grid point exactly, at an edge
      b.scales = static_cast<int64_t>(xs.size());
      b.seeds = fewest;
      // Bootstrap: each scale's seeds resampled with replacement, the estimate redone.
      std::vector<double> draws(kDraws);
      std::vector<double> m(xs.size());
      for (int d = 0; d < kDraws; ++d) {
        size_t j = 0;
        for (const auto& [x, v] : per_c) {
          std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
          double sum = 0;
          for (size_t k = 0; k < v.size(); ++k) sum += v[pick(rng)];
          m[j++] = sum / static_cast<double>(v.size());
        }
        bool edge = false;
        draws[d] = best_log_c(xs, m, &edge);
      }
      b.c_lo = std::exp(percentile(draws, 0.025));
      b.c_hi = std::exp(percentile(draws, 0.975));
      out.best.push_back(b);
      log_n.push_back(std::log(length));
      log_c.push_back(x_star);
      draws_of_n.push_back(std::move(draws));
    }
    if (log_n.size() < 2) continue;
    BestScaleFit f;
    f.metric = key.first;
    f.group = key.second;
    f.points = static_cast<int64_t>(log_n.size());
    f.slope = ols_slope(log_n, log_c, &f.intercept);
    std::vector<double> slopes(kDraws), y(log_n.size());
    for (int d = 0; d < kDraws; ++d) {
      for (size_t i = 0; i < log_n.size(); ++i) y[i] = draws_of_n[i][static_cast<size_t>(d)];
      slopes[static_cast<size_t>(d)] = ols_slope(log_n, y);
    }
    f.slope_lo = percentile(slopes, 0.025);
    f.slope_hi = percentile(slopes, 0.975);
    out.fits.push_back(f);
  }
  return out;
}

namespace {
std::vector<Column> best_columns(const std::vector<BestScale>& v) {
  if (v.empty()) return {};
  return {
      string_column("metric", "test metric the scale is best by (accuracy: largest; loss, mse: smallest)",
                    column_of(v, &BestScale::metric)),
      string_column("group", "the other parameters but scale, prompt_length and the seeds, k=v in key order",
                    column_of(v, &BestScale::group)),
      float_column("prompt_length", "N", column_of(v, &BestScale::prompt_length)),
      float_column("c_star", "best scale: the parabola vertex in log c through the best mean and its neighbours",
                   column_of(v, &BestScale::c_star)),
      float_column("c_lo", "2.5th percentile of c_star over bootstrap resamples of the seeds",
                   column_of(v, &BestScale::c_lo)),
      float_column("c_hi", "97.5th percentile of c_star over bootstrap resamples of the seeds",
                   column_of(v, &BestScale::c_hi)),
      int_column("at_edge", "1 when the best mean is at the smallest or largest scale of the grid",
                 column_of(v, [](const BestScale& x) { return int64_t{x.at_edge}; })),
      int_column("scales", "distinct scales at this N", column_of(v, &BestScale::scales)),
      int_column("seeds", "replicates per scale (the fewest)", column_of(v, &BestScale::seeds)),
  };
}
std::vector<Column> fit_columns(const std::vector<BestScaleFit>& v) {
  if (v.empty()) return {};
  return {
      string_column("metric", "as in /best_scale", column_of(v, &BestScaleFit::metric)),
      string_column("group", "as in /best_scale", column_of(v, &BestScaleFit::group)),
      float_column("slope", "OLS slope of log c_star on log N (paper A's 1/sqrt(N): -0.5)",
                   column_of(v, &BestScaleFit::slope)),
      float_column("intercept", "OLS intercept (natural logs)", column_of(v, &BestScaleFit::intercept)),
      float_column("slope_lo", "2.5th percentile of the slope over bootstrap resamples",
                   column_of(v, &BestScaleFit::slope_lo)),
      float_column("slope_hi", "97.5th percentile of the slope over bootstrap resamples",
                   column_of(v, &BestScaleFit::slope_hi)),
      int_column("points", "prompt lengths in the fit", column_of(v, &BestScaleFit::points)),
  };
}
}  // namespace

void write_best_scale(const std::string& csv_path, const BestScaleResult& r) {
  write_csv(csv_path, best_columns(r.best), r.best.size());
}

void write_best_scale_group(h5::File& f, const BestScaleResult& r) {
  if (r.best.empty()) return;
  h5::Group g = f.require_group("/best_scale");
  for (const Column& c : best_columns(r.best)) write_column(g, c);
  if (r.fits.empty()) return;
  h5::Group h = f.require_group("/best_scale_fit");
  for (const Column& c : fit_columns(r.fits)) write_column(h, c);
}

}  // namespace attnsweep
