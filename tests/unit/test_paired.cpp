// Paired comparisons of activations (results/paired.h): which cells pair, the paired
// statistics, and what aggregate writes (paired.csv, /paired).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "results/aggregate.h"
#include "results/cell_file.h"
#include "results/paired.h"

namespace attnsweep {
namespace {
namespace fs = std::filesystem;
using json = nlohmann::json;

CellRow cell(const std::string& act, int64_t n, int64_t init_seed, int64_t seed, double mse, bool complete = true) {
  CellRow c;
  c.params = {{"task", "icl_regression"}, {"activation", act},      {"degree", 1},  {"scale", "inv_n"},
              {"prompt_length", n},       {"init_seed", init_seed}, {"seed", seed}, {"lr", 0.1}};
  c.metrics = {{"test_mse", mse}};
  c.complete = complete;
  return c;
}

// Four initialisations at L = 10 with differences 0.1, 0.2, 0.3, 0.6 (mean 0.3, sd
// sqrt(0.14/3)), softmax's risks spread far more than the differences: the interval is
// that of the differences, t(0.975, 3) = 3.182446305284263.
TEST(Paired, DifferencesAreThoseOfTheSameInitialisation) {
  std::vector<CellRow> cells;
  const double base[] = {0.2, 0.5, 0.9, 0.3}, gap[] = {0.1, 0.2, 0.3, 0.6};
  for (int64_t i = 0; i < 4; ++i) {
    cells.push_back(cell("poly", 10, i, 0, base[i]));
    cells.push_back(cell("softmax", 10, i, 0, base[i] + gap[i]));
  }
  const auto d = paired_differences(cells);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].a, "activation=softmax");  // registry order: softmax before poly
  EXPECT_EQ(d[0].b, "activation=poly degree=1 scale=inv_n");
  EXPECT_EQ(d[0].group, "lr=0.1 task=icl_regression");
  EXPECT_EQ(d[0].pairs, 4);
  EXPECT_NEAR(d[0].mean_diff, 0.3, 1e-12);
  EXPECT_NEAR(d[0].mean_b, 0.475, 1e-12);
  EXPECT_NEAR(d[0].mean_a, 0.775, 1e-12);
  const double sd = std::sqrt(0.14 / 3);
  EXPECT_NEAR(d[0].sd_diff, sd, 1e-12);
  EXPECT_NEAR(d[0].ci95, 3.182446305284263 * sd / 2, 1e-9);
  EXPECT_EQ(d[0].a_lower, 0);
}

// Cells without a prompt length (a command task's): one row per metric, each of its own
// values. A NaN prompt length in the rows' ordering once merged every metric of a group
// into the first one's row.
TEST(Paired, CellsWithoutPromptLengthKeepTheirMetricsApart) {
  std::vector<CellRow> cells;
  for (int64_t seed = 0; seed < 2; ++seed)
    for (const char* act : {"softmax", "relu"}) {
      CellRow c;
      c.params = {{"task", "command"}, {"activation", act}, {"seed", seed}, {"lr", 0.01}};
      const double relu = std::string(act) == "relu" ? 1 : 0;
      c.metrics = {{"test_accuracy", 0.8 - 0.1 * relu}, {"test_loss", 0.5 + 0.2 * relu}};
      c.complete = true;
      cells.push_back(c);
    }
  const auto d = paired_differences(cells);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].metric, "test_accuracy");
  EXPECT_EQ(d[1].metric, "test_loss");
  for (const auto& x : d) {
    EXPECT_TRUE(std::isnan(x.prompt_length));
    EXPECT_EQ(x.pairs, 2);
  }
  EXPECT_NEAR(d[0].mean_diff, 0.1, 1e-12);
  EXPECT_NEAR(d[1].mean_diff, -0.2, 1e-12);
}

// Cells pair only when every other parameter, both seeds included, agrees; one per L.
TEST(Paired, OnlyCellsEqualButForTheActivationPair) {
  std::vector<CellRow> cells = {
      cell("softmax", 10, 0, 0, 0.5),  cell("poly", 10, 0, 0, 0.7),          // a pair at L 10
      cell("softmax", 40, 0, 0, 0.4),  cell("poly", 40, 0, 1, 0.1),          // other data seed: no pair
      cell("softmax", 40, 1, 0, 0.4),  cell("poly", 40, 2, 0, 0.1),          // other init: no pair
      cell("softmax", 160, 0, 0, 0.4), cell("poly", 160, 0, 0, 0.1, false),  // diverged: no pair
  };
  CellRow other_lr = cell("poly", 10, 0, 0, 9.0);
  other_lr.params["lr"] = 0.2;  // another group
  cells.push_back(other_lr);
  const auto d = paired_differences(cells);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].prompt_length, 10);
  EXPECT_EQ(d[0].pairs, 1);
  EXPECT_NEAR(d[0].mean_diff, -0.2, 1e-12);
  EXPECT_EQ(d[0].a_lower, 1);
  EXPECT_TRUE(std::isnan(d[0].sd_diff));
  EXPECT_TRUE(std::isnan(d[0].ci95));
}

// Three activations: every pair of them, in registry order; softmax's degree does not
// name it (it takes none), so softmax at degree 1 and 3 counts once.
TEST(Paired, EveryPairOfActivationsInRegistryOrder) {
  std::vector<CellRow> cells = {cell("relu", 16, 0, 0, 3.0), cell("poly", 16, 0, 0, 2.0),
                                cell("softmax", 16, 0, 0, 1.0)};
  CellRow again = cell("softmax", 16, 0, 0, 100.0);
  again.params["degree"] = 3;
  cells.push_back(again);
  CellRow cubic = cell("poly", 16, 0, 0, 5.0);
  cubic.params["degree"] = 3;
  cells.push_back(cubic);
  const auto d = paired_differences(cells);
  std::vector<std::pair<std::string, std::string>> got;
  for (const PairedDiff& x : d) got.emplace_back(x.a, x.b);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"activation=softmax", "activation=poly degree=1 scale=inv_n"},
      {"activation=softmax", "activation=poly degree=3 scale=inv_n"},
      {"activation=softmax", "activation=relu scale=inv_n"},
      {"activation=poly degree=1 scale=inv_n", "activation=poly degree=3 scale=inv_n"},
      {"activation=poly degree=1 scale=inv_n", "activation=relu scale=inv_n"},
      {"activation=poly degree=3 scale=inv_n", "activation=relu scale=inv_n"},
  };
  EXPECT_EQ(got, want);
  EXPECT_NEAR(d[0].mean_diff, 1.0 - 2.0, 1e-12);  // the first softmax cell, not the degree-3 one
}

// aggregate writes the comparisons as paired.csv and /paired, and none for cells that
// do not pair (and removes a stale paired.csv).
TEST(Paired, AggregateWritesPairedCsv) {
  std::random_device rd;
  const fs::path dir =
      fs::temp_directory_path() / ("attnsweep_paired_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
  fs::create_directories(dir / "runs");
  for (const char* act : {"softmax", "poly"})
    for (int64_t init : {0, 1, 2}) {
      CellResult r;
      r.config = json{{"activation", act},   {"degree", 1},       {"scale", "inv_n"},
                      {"prompt_length", 40}, {"init_seed", init}, {"seed", 0}};
      r.cell_id = std::string(act) + std::to_string(init);
      r.final_metrics = {{"test_mse", (std::string(act) == "softmax" ? 1.0 : 0.5) + 0.25 * double(init)}};
      write_cell_file((dir / "runs" / (r.cell_id + ".h5")).string(), r);
    }
  AggregateResult a = aggregate_dir(dir.string(), {});
  ASSERT_EQ(a.paired.size(), 1u);
  EXPECT_EQ(a.paired[0].pairs, 3);
  EXPECT_NEAR(a.paired[0].mean_diff, 0.5, 1e-12);
  EXPECT_NEAR(a.paired[0].sd_diff, 0.0, 1e-12);
  std::ifstream in(dir / "paired.csv");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(),
            "metric,group,prompt_length,a,b,pairs,mean_a,mean_b,mean_diff,sd_diff,ci95,a_lower\n"
            "test_mse,,40,activation=softmax,activation=poly degree=1 scale=inv_n,3,1.25,0.75,0.5,0,0,0\n");
  h5::File f = h5::File::open_read((dir / "aggregate.h5").string());
  EXPECT_EQ(f.open_dataset("/paired/pairs").read<int64_t>(), std::vector<int64_t>{3});

  for (int64_t init : {0, 1, 2}) fs::remove(dir / "runs" / ("poly" + std::to_string(init) + ".h5"));
  EXPECT_TRUE(aggregate_dir(dir.string(), {}).paired.empty());
  EXPECT_FALSE(fs::exists(dir / "paired.csv"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace attnsweep
