// results/fits.h: the Student t quantiles and the log-log fits of the report.
#include "results/fits.h"

#include <gtest/gtest.h>

#include <cmath>

namespace attnsweep {
namespace {

TEST(Fits, StudentTQuantiles) {
  EXPECT_NEAR(student_t_quantile(0.975, 1), 12.706204736174698, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.975, 2), 4.302652729749464, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 10), 2.228138851986274, 1e-10);
  EXPECT_NEAR(student_t_quantile(0.975, 1000), 1.9623390808264078, 1e-9);
  EXPECT_NEAR(student_t_quantile(0.025, 10), -2.228138851986274, 1e-10);
}

TEST(Fits, LogLogOls) {
  Fit two = fit_loglog({2, 8}, {1, 4});
  EXPECT_NEAR(two.slope, 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(two.slope_ci95));
  EXPECT_EQ(two.points, 2);

  Fit none = fit_loglog({4, 4, 4}, {1, 2, 3});
  EXPECT_TRUE(std::isnan(none.slope));

  // Non-positive points are dropped; noise gives r2 < 1 and a finite interval.
  Fit noisy = fit_loglog({1, 2, 4, 8, 16, -1, 3}, {1.1, 1.9, 4.2, 7.7, 16.5, 5, 0});
  EXPECT_EQ(noisy.points, 5);
  EXPECT_NEAR(noisy.slope, 1.0, 0.05);
  EXPECT_LT(noisy.r2, 1.0);
  EXPECT_GT(noisy.r2, 0.99);
  EXPECT_GT(noisy.slope_ci95, 0.0);
  EXPECT_LT(noisy.slope_ci95, 0.2);
}

}  // namespace
}  // namespace attnsweep
