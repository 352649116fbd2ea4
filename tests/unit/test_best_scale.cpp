// The best scale against prompt length (results/best_scale.h): c*(N) found between grid
// points, its bootstrap interval, the slope of log c* on log N, and what aggregate writes.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "results/best_scale.h"

namespace attnsweep {
namespace {

// Accuracy a parabola in log c with its peak at c*(N) = 1.5 / sqrt(N) (off the grid of
// scales 2^-k), plus noise of sd `noise` per seed.
std::vector<CellRow> sweep(double noise, int seeds) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> eps(0.0, noise);
  std::vector<CellRow> cells;
  for (int n : {16, 64, 256})
    for (int k = 0; k <= 7; ++k)
      for (int seed = 0; seed < seeds; ++seed) {
        const double c = std::ldexp(1.0, -k), peak = 1.5 / std::sqrt(double(n));
        const double d = std::log(c) - std::log(peak);
        CellRow r;
        r.params = {{"task", "image"}, {"activation", "poly"}, {"degree", 3},
                    {"scale", c},      {"prompt_length", n},   {"seed", seed}};
        r.metrics = {{"test_accuracy", 0.9 - 0.05 * d * d + (noise > 0 ? eps(rng) : 0.0)},
                     {"test_loss", 0.3 + 0.1 * d * d}};
        r.complete = true;
        cells.push_back(r);
      }
  return cells;
}

TEST(BestScale, ParabolaFindsTheOffGridPeakAndItsSlope) {
  const BestScaleResult r = best_scales(sweep(0.0, 2));
  ASSERT_EQ(r.best.size(), 6u);  // test_accuracy and test_loss at 3 N
  for (const BestScale& b : r.best) {
    EXPECT_EQ(b.group, "activation=poly degree=3 task=image");
    EXPECT_NEAR(b.c_star, 1.5 / std::sqrt(b.prompt_length), 1e-9) << b.metric << " N " << b.prompt_length;
    EXPECT_FALSE(b.at_edge);
    EXPECT_EQ(b.scales, 8);
    EXPECT_EQ(b.seeds, 2);
    EXPECT_NEAR(b.c_lo, b.c_star, 1e-9);  // no noise: every resample agrees
  }
  ASSERT_EQ(r.fits.size(), 2u);
  for (const BestScaleFit& f : r.fits) {
    EXPECT_NEAR(f.slope, -0.5, 1e-9);
    EXPECT_NEAR(f.intercept, std::log(1.5), 1e-9);
    EXPECT_EQ(f.points, 3);
  }
}

// With seed noise (sd 0.01 against a peak 0.05 above its neighbours) and 12 seeds the
// intervals hold the true c* at every N and the true slope; with 3 seeds they are wider.
// (Percentile intervals from 3 seeds undercover, so only their width is checked.)
TEST(BestScale, BootstrapIntervalsHoldTheTruth) {
  const BestScaleResult few = best_scales(sweep(0.01, 3)), many = best_scales(sweep(0.01, 12));
  for (const BestScaleResult* r : {&many})
    for (const BestScale& b : r->best) {
      if (b.metric != "test_accuracy") continue;
      const double truth = 1.5 / std::sqrt(b.prompt_length);
      EXPECT_LE(b.c_lo, truth) << "N " << b.prompt_length;
      EXPECT_GE(b.c_hi, truth) << "N " << b.prompt_length;
      EXPECT_LT(b.c_lo, b.c_hi);
    }
  auto width = [](const BestScaleResult& r) {
    double w = 0;
    for (const BestScale& b : r.best)
      if (b.metric == "test_accuracy") w += std::log(b.c_hi / b.c_lo);
    return w;
  };
  EXPECT_GT(width(few), width(many));
  for (const BestScaleFit& f : many.fits)
    if (f.metric == "test_accuracy") {
      EXPECT_LE(f.slope_lo, -0.5);
      EXPECT_GE(f.slope_hi, -0.5);
    }
}

// A peak beyond the grid is reported at the grid's edge, and flagged.
TEST(BestScale, PeakBeyondTheGridIsFlagged) {
  std::vector<CellRow> cells;
  for (double c : {0.5, 0.25, 0.125}) {
    CellRow r;
    r.params = {{"scale", c}, {"prompt_length", 16}, {"seed", 0}};
    r.metrics = {{"test_accuracy", 1.0 - c}};  // best at the smallest scale
    r.complete = true;
    cells.push_back(r);
  }
  CellRow named;  // a named scale takes no part
  named.params = {{"scale", "inv_n"}, {"prompt_length", 16}, {"seed", 0}};
  named.metrics = {{"test_accuracy", 2.0}};
  named.complete = true;
  cells.push_back(named);
  const BestScaleResult r = best_scales(cells);
  ASSERT_EQ(r.best.size(), 1u);
  EXPECT_TRUE(r.best[0].at_edge);
  EXPECT_DOUBLE_EQ(r.best[0].c_star, 0.125);
  EXPECT_EQ(r.best[0].scales, 3);
  EXPECT_TRUE(r.fits.empty());  // one N
}

}  // namespace
}  // namespace attnsweep
