// Claims and verdicts (results/claims.h, results/verdict.h) on planted data whose truth is
// known: a real effect is supported, a null effect inside a tight margin is equivalent
// with 20 units and unresolved with 3, a contradiction is called one, a spread from one
// source of variation is warned of, a best value at the grid's edge is not testable, and
// the grid refuses claims its cells cannot test.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "coordinator/grid.h"
#include "results/stats.h"
#include "results/table.h"
#include "results/trajectory_metric.h"
#include "results/verdict.h"

namespace attnsweep {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kKeys = {"activation", "init_seed", "prompt_length", "seed", "task"};

Claim claim_of(const json& j) {
  std::vector<std::pair<std::string, std::string>> problems;
  std::vector<Claim> c = parse_claims(json::array({j}), problems);
  for (const auto& [p, m] : problems) ADD_FAILURE() << p << ": " << m;
  return c.empty() ? Claim{} : c.front();
}

ClaimCell cell(const std::string& act, int seed, int init_seed, int n, double acc) {
  ClaimCell c;
  c.values = {{"task", "image"},
              {"status", "complete"},
              {"activation", act},
              {"seed", std::to_string(seed)},
              {"init_seed", std::to_string(init_seed)},
              {"prompt_length", std::to_string(n)},
              {"test_accuracy", format_number(acc)}};
  return c;
}

SummaryTable table_of(std::vector<ClaimCell> rows) {
  SummaryTable t;
  t.columns = {"status", "task", "activation", "seed", "init_seed", "prompt_length", "test_accuracy"};
  t.rows = std::move(rows);
  return t;
}

// Units whose paired difference a - b is `effect` plus the unit's entry of `noise`
// (fixed numbers, so the test is deterministic); each unit its own init_seed unless
// `one_init`.
SummaryTable paired(double effect, const std::vector<double>& noise, bool one_init = false) {
  std::vector<ClaimCell> rows;
  for (size_t u = 0; u < noise.size(); ++u) {
    const int s = static_cast<int>(u);
    const double base = 0.85 + 0.004 * std::sin(3.0 * s);  // units differ in level too
    rows.push_back(cell("poly", s, one_init ? 0 : s, 49, base + effect + noise[u]));
    rows.push_back(cell("softmax", s, one_init ? 0 : s, 49, base));
  }
  return table_of(rows);
}

const json kDifference = {{"id", "poly_above"},
                          {"statement", "poly beats softmax"},
                          {"kind", "difference"},
                          {"metric", "test_accuracy"},
                          {"a", {{"activation", "poly"}}},
                          {"b", {{"activation", "softmax"}}},
                          {"pair_by", {"seed"}},
                          {"direction", "a > b"}};

json equivalence(double margin) {
  return {{"id", "poly_level"},
          {"statement", "poly is level with softmax"},
          {"kind", "equivalence"},
          {"metric", "test_accuracy"},
          {"a", {{"activation", "poly"}}},
          {"b", {{"activation", "softmax"}}},
          {"pair_by", {"seed"}},
          {"margin", margin}};
}

Verdict decide(const json& claim, const SummaryTable& t) {
  std::vector<Verdict> v = decide_claims({claim_of(claim)}, t, kKeys, 4000, "before the run");
  EXPECT_EQ(v.size(), 1u);
  return v.empty() ? Verdict{} : v.front();
}

// 20 fixed deviations in [-0.002, 0.002], mean 0.
const std::vector<double> kNoise20 = {0.0015,  -0.0012, 0.0008, -0.0019, 0.0002, 0.0011,  -0.0006,
                                      0.0017,  -0.0014, 0.0004, -0.0015, 0.0012, -0.0008, 0.0019,
                                      -0.0002, -0.0011, 0.0006, -0.0017, 0.0014, -0.0004};

TEST(Verdict, RealEffectOfOnePointWithTenUnitsIsSupported) {
  const std::vector<double> noise(kNoise20.begin(), kNoise20.begin() + 10);
  const Verdict v = decide(kDifference, paired(0.01, noise));
  EXPECT_EQ(v.word, "supported") << v.reason;
  EXPECT_EQ(v.units, 10);
  EXPECT_NEAR(v.estimate, 0.01 + 0.0001, 1e-3);  // the 10 deviations' mean is 1e-4
  EXPECT_GT(v.lo, 0.0);
  EXPECT_LT(v.lo, v.estimate);
  EXPECT_GT(v.hi, v.estimate);
  EXPECT_DOUBLE_EQ(v.p_a_greater, 1.0);
  EXPECT_TRUE(v.warnings.empty()) << v.warnings;  // seed and init_seed both vary
}

TEST(Verdict, OppositeEffectContradictsAndNullIsUnresolved) {
  const std::vector<double> noise(kNoise20.begin(), kNoise20.begin() + 10);
  EXPECT_EQ(decide(kDifference, paired(-0.01, noise)).word, "contradicted");
  const Verdict null = decide(kDifference, paired(0.0, noise));
  EXPECT_EQ(null.word, "unresolved");
  EXPECT_LT(null.lo, 0.0);
  EXPECT_GT(null.hi, 0.0);
}

TEST(Verdict, NullEffectInsideATightMarginWithTwentyUnitsIsEquivalent) {
  const Verdict v = decide(equivalence(0.003), paired(0.0, kNoise20));
  EXPECT_EQ(v.word, "supported") << v.reason << " [" << v.lo << ", " << v.hi << "]";
  EXPECT_GT(v.lo, -0.003);
  EXPECT_LT(v.hi, 0.003);
}

TEST(Verdict, TheSameWithThreeUnitsIsUnresolvedAndSaysHowManyWould) {
  const Verdict v = decide(equivalence(0.003), paired(0.0, {0.0015, -0.0012, 0.0008}));
  EXPECT_EQ(v.word, "unresolved") << " [" << v.lo << ", " << v.hi << "]";
  EXPECT_EQ(v.units, 3);
  // The interval is at least the Student-t interval of the 3 differences (the plain
  // percentile one is narrower than the data's range).
  const double sd = 0.001365;  // sample sd of {0.0015, -0.0012, 0.0008}
  EXPECT_LT(v.lo, v.estimate - 0.9 * student_t_quantile(0.975, 2) * sd / std::sqrt(3.0));
  EXPECT_GT(v.units_needed, 3.0);
  EXPECT_LT(v.units_needed, 1000.0);
}

TEST(Verdict, EquivalenceOutsideTheMarginIsContradicted) {
  EXPECT_EQ(decide(equivalence(0.003), paired(0.01, kNoise20)).word, "contradicted");
}

TEST(Verdict, SeedsThatVaryDataOrderOnlyAreWarnedOf) {
  const std::vector<double> noise(kNoise20.begin(), kNoise20.begin() + 10);
  const Verdict v = decide(kDifference, paired(0.01, noise, /*one_init=*/true));
  EXPECT_EQ(v.word, "supported");
  EXPECT_NE(v.warnings.find("spread from seed only: init_seed is the same in every unit"), std::string::npos)
      << v.warnings;
}

// Accuracy a parabola in log c, its peak at c*(N) = 0.35 / sqrt(N), scanned over c =
// 2^-k for k in `ks`, per unit (seed) a small level shift.
SummaryTable scan(std::vector<int> ks) {
  SummaryTable t;
  t.columns = {"status", "task", "activation", "seed", "init_seed", "prompt_length", "scale", "test_accuracy"};
  for (int n : {16, 64, 256})
    for (int k : ks)
      for (int s = 0; s < 6; ++s) {
        const double c = std::ldexp(1.0, -k), d = std::log(c) - std::log(0.35 / std::sqrt(double(n)));
        ClaimCell r = cell("poly", s, s, n, 0.9 - 0.02 * d * d + 0.001 * std::sin(5.0 * s + k));
        r.values["scale"] = format_number(c);
        t.rows.push_back(r);
      }
  return t;
}

const json kArgmax = {{"id", "cstar"},          {"statement", "c* falls like 1/sqrt(N)"},
                      {"kind", "argmax_slope"}, {"metric", "test_accuracy"},
                      {"x", "prompt_length"},   {"over", "scale"},
                      {"pair_by", {"seed"}},    {"expect", -0.5},
                      {"tolerance", 0.15}};

TEST(Verdict, BestScaleInsideTheGridGivesTheSlope) {
  const Verdict v = decide(kArgmax, scan({0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(v.word, "supported") << v.reason << " [" << v.lo << ", " << v.hi << "]";
  EXPECT_NEAR(v.estimate, -0.5, 0.08);
}

TEST(Verdict, BestScaleAtTheGridsEdgeIsNotTestable) {
  // c* = 0.35/4 = 0.088 at N = 16 (and less at larger N): the scan stops at 1/8, so the
  // best is its lowest c.
  const Verdict v = decide(kArgmax, scan({0, 1, 2, 3}));
  EXPECT_EQ(v.word, "not testable") << v.reason;
  EXPECT_NE(v.reason.find("censored: the best scale at prompt_length 16 is the grid's lowest (0.125): extend "
                          "scale below 0.125"),
            std::string::npos)
      << v.reason;
}

TEST(Verdict, SlopeAndTrend) {
  // metric = 2 N^0.5 per unit, times a unit's factor: the log-log slope is 0.5.
  SummaryTable t = table_of({});
  for (int s = 0; s < 4; ++s)
    for (int n : {16, 64, 256}) t.rows.push_back(cell("softmax", s, s, n, 2.0 * std::sqrt(n) * (1 + 0.02 * s)));
  const json slope = {{"id", "half"},         {"statement", "grows like sqrt N"},
                      {"kind", "slope"},      {"metric", "test_accuracy"},
                      {"x", "prompt_length"}, {"pair_by", {"seed"}},
                      {"expect", 0.5},        {"tolerance", 0.05}};
  const Verdict v = decide(slope, t);
  EXPECT_EQ(v.word, "supported");
  EXPECT_NEAR(v.estimate, 0.5, 1e-9);
  EXPECT_TRUE(v.warnings.empty()) << v.warnings;  // init_seed follows seed: part of the unit, not pooled
  SummaryTable mixed = t;                         // init_seed now varies within a unit (over N): pooled, and said
  for (size_t i = 0; i < mixed.rows.size(); ++i) mixed.rows[i].values["init_seed"] = std::to_string(i % 2);
  EXPECT_NE(decide(slope, mixed).warnings.find("pooled over init_seed (2 values)"), std::string::npos)
      << decide(slope, mixed).warnings;
  json wrong = slope;
  wrong["expect"] = 1.0;
  EXPECT_EQ(decide(wrong, t).word, "contradicted");
  const json trend = {
      {"id", "up"},           {"statement", "increases"}, {"kind", "trend"},          {"metric", "test_accuracy"},
      {"x", "prompt_length"}, {"pair_by", {"seed"}},      {"direction", "increasing"}};
  EXPECT_EQ(decide(trend, t).word, "supported");
}

TEST(Verdict, AGapThatShrinksWithNIsADecreasingDifferenceTrend) {
  // a − b = 0.2 / sqrt(N) per unit (times a unit's factor): the gap shrinks as N grows.
  SummaryTable t = table_of({});
  for (int s = 0; s < 5; ++s)
    for (int n : {10, 40, 160, 640}) {
      t.rows.push_back(cell("softmax", s, s, n, 0.5 + 0.2 / std::sqrt(n) * (1 + 0.1 * s)));
      t.rows.push_back(cell("poly", s, s, n, 0.5));
    }
  json claim = {{"id", "gap"},
                {"statement", "softmax approaches linear"},
                {"kind", "difference_trend"},
                {"metric", "test_accuracy"},
                {"a", {{"activation", "softmax"}}},
                {"b", {{"activation", "poly"}}},
                {"x", "prompt_length"},
                {"pair_by", {"seed"}},
                {"direction", "decreasing"}};
  const Verdict v = decide(claim, t);
  EXPECT_EQ(v.word, "supported") << v.reason;
  EXPECT_EQ(v.units, 5);
  EXPECT_LT(v.hi, 0.0);
  claim["direction"] = "increasing";
  EXPECT_EQ(decide(claim, t).word, "contradicted");
  // A constant gap: no trend to find.
  for (auto& r : t.rows)
    if (r.get("activation") == "softmax")
      r.values["test_accuracy"] = format_number(0.6 + 0.001 * std::stoi(r.get("seed")));
  EXPECT_EQ(decide(claim, t).word, "unresolved");
}

TEST(Verdict, MissingGroupOrOneUnitIsNotTestable) {
  const std::vector<double> noise(kNoise20.begin(), kNoise20.begin() + 10);
  json other = kDifference;
  other["b"] = {{"activation", "relu"}};
  const Verdict none = decide(other, paired(0.01, noise));
  EXPECT_EQ(none.word, "not testable");
  EXPECT_EQ(none.reason, "group b matches no cell");
  const Verdict one = decide(kDifference, paired(0.01, {0.0}));
  EXPECT_EQ(one.word, "not testable");
  EXPECT_NE(one.reason.find("1 unit holds both groups"), std::string::npos) << one.reason;
}

TEST(Verdict, SmallSampleWideningIsStudentsAtTheMean) {
  EXPECT_NEAR(small_sample_widening(3), std::sqrt(1.5) * 4.302653 / 1.959964, 1e-5);
  EXPECT_NEAR(small_sample_widening(1000), 1.0, 2e-3);
}

// late: the mean over heads and the last quarter of the rows; growth: log of that over
// the quarter before; both of one layer of a [T, L, H] trajectory.
TEST(TrajectoryMetric, LateAndGrowthOfOneLayer) {
  const std::string path = (std::filesystem::temp_directory_path() / "attnsweep-traj-test.h5").string();
  {
    h5::File f = h5::File::create(path);
    std::vector<float> v;  // T 8, L 2, H 2: layer 1 = t + h, layer 2 = 10 (flat)
    for (int t = 0; t < 8; ++t)
      for (int l = 0; l < 2; ++l)
        for (int h = 0; h < 2; ++h) v.push_back(l == 0 ? static_cast<float>(t + h) : 10.0f);
    f.write_dataset<float>("/norms/attn_fro", {8, 2, 2}, v, "test");
  }
  const h5::File f = h5::File::open_read(path);
  std::string problem;
  auto late1 = parse_trajectory_metric("late:norms/attn_fro:layer1", &problem);
  ASSERT_TRUE(late1) << problem;
  EXPECT_EQ(late1->path, "/norms/attn_fro");
  // rows 6, 7 (the last quarter of 8), heads 0, 1: (6 + 7 + 7 + 8) / 4
  EXPECT_DOUBLE_EQ(trajectory_metric_value(f, *late1), 7.0);
  // rows 4, 5 before it: mean 5; growth log(7 / 5)
  EXPECT_NEAR(trajectory_metric_value(f, *parse_trajectory_metric("growth:norms/attn_fro:layer1", &problem)),
              std::log(7.0 / 5.0), 1e-12);
  EXPECT_DOUBLE_EQ(trajectory_metric_value(f, *parse_trajectory_metric("growth:norms/attn_fro:layer2", &problem)), 0.0);
  EXPECT_TRUE(std::isnan(trajectory_metric_value(f, *parse_trajectory_metric("late:norms/attn_fro:layer3", &problem))));
  EXPECT_TRUE(std::isnan(trajectory_metric_value(f, *parse_trajectory_metric("late:norms/jac_fro:layer1", &problem))));
  EXPECT_FALSE(parse_trajectory_metric("test_accuracy", &problem));
  EXPECT_TRUE(problem.empty());
  EXPECT_FALSE(parse_trajectory_metric("late:norms/attn_fro", &problem));
  EXPECT_NE(problem.find("expected late:<dataset>:layer<k>"), std::string::npos) << problem;
  std::remove(path.c_str());
}

TEST(Claims, GridChecksATrajectoryMetric) {
  const std::string grid = R"({"axes": {"task": ["image"], "activation": ["softmax", "poly"], "seed": [0, 1]},
    "fixed": {"prompt_length": 16, "degree": 3, "scale": "inv_sqrt_n", "steps": 10, "layers": 2},
    "claims": [{"id": "deep", "statement": "s", "kind": "difference", "metric": "late:norms/attn_fro:layer3",
                "a": {"activation": "poly"}, "b": {"activation": "softmax"}, "pair_by": ["seed"], "direction": "a > b"},
               {"id": "none", "statement": "s", "kind": "difference", "metric": "late:norms/phi:layer1",
                "a": {"activation": "poly"}, "b": {"activation": "softmax"}, "pair_by": ["seed"], "direction": "a > b"}]})";
  try {
    parse_grid(grid, "g.json");
    FAIL() << "expected the metrics refused";
  } catch (const InputError& e) {
    std::string all;
    for (const std::string& l : e.problems) all += l + "\n";
    EXPECT_NE(all.find("g.json: claims[0].metric: layer 3 is beyond the cells' layers (2)"), std::string::npos) << all;
    EXPECT_NE(all.find("g.json: claims[1].metric: /norms/phi is no [T, L, H] trajectory of task image"),
              std::string::npos)
        << all;
  }
}

TEST(Claims, ParseNamesEveryProblem) {
  std::vector<std::pair<std::string, std::string>> problems;
  parse_claims(json::parse(R"([{"id": "x", "statement": "s", "kind": "equivalnce", "metric": "m", "pair_by": ["seed"]},
                               {"id": "y", "statement": "s", "kind": "equivalence", "metric": "m", "pair_by": ["seed"],
                                "a": {"activation": "poly"}, "b": {"activation": "softmax"}, "margni": 1}])"),
               problems);
  std::vector<std::string> lines;
  for (const auto& [p, m] : problems) lines.push_back(p + ": " + m);
  ASSERT_EQ(lines.size(), 3u) << ::testing::PrintToString(lines);
  EXPECT_NE(lines[0].find("claims[0].kind: expected one of"), std::string::npos);
  EXPECT_NE(lines[0].find("(did you mean \"equivalence\"?)"), std::string::npos);
  EXPECT_EQ(lines[1], "claims[1].margni: unknown key (did you mean \"margin\"?)");
  EXPECT_EQ(lines[2], "claims[1]: missing margin (a equivalence claim needs it)");
}

// The grid refuses a claim its cells cannot test, naming why.
TEST(Claims, GridRefusesAClaimItCannotTest) {
  const std::string grid = R"({"axes": {"task": ["image"], "activation": ["softmax", "poly"], "seed": [0]},
    "fixed": {"prompt_length": 16, "degree": 3, "scale": "inv_sqrt_n", "steps": 10},
    "claims": [{"id": "eq", "statement": "level", "kind": "equivalence", "metric": "test_accuracy",
                "a": {"activation": "poly"}, "b": {"activation": "softmax"}, "pair_by": ["seed"], "margin": 0.005},
               {"id": "typo", "statement": "s", "kind": "difference", "metric": "test_acuracy", "direction": "a > b",
                "a": {"activation": "poly"}, "b": {"activaton": "softmax"}, "pair_by": ["seed"]}]})";
  try {
    parse_grid(grid, "g.json");
    FAIL() << "expected the claims refused";
  } catch (const InputError& e) {
    std::string all;
    for (const std::string& l : e.problems) all += l + "\n";
    EXPECT_NE(all.find("g.json: claims[0]: this grid cannot test the claim \"eq\": 1 unit holds both groups"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("g.json: claims[1].b.activaton: no cell of this grid has the key activaton (did you mean "
                       "\"activation\"?)"),
              std::string::npos)
        << all;
    EXPECT_NE(all.find("g.json: claims[1].metric: test_acuracy is no final metric of task image (did you mean "
                       "\"test_accuracy\"?)"),
              std::string::npos)
        << all;
  }
  // With two seeds it is testable, and the claims are the grid's.
  std::string two = grid;
  two.replace(two.find("\"seed\": [0]"), 11, "\"seed\": [0, 1]");
  two.erase(two.find(",\n               {\"id\": \"typo\""), std::string::npos);
  two += "]}";
  const Grid g = parse_grid(two, "g.json");
  ASSERT_EQ(g.claims.size(), 1u);
  EXPECT_EQ(g.claims[0].id, "eq");
}

}  // namespace
}  // namespace attnsweep
