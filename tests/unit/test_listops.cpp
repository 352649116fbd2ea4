// experiments/listops: labels against an independent evaluator of the token string, the
// generator's bounds (length, depth, arity), seeding, and the task's parameter checks.
#include "experiments/listops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "coordinator/grid.h"

namespace attnsweep {
namespace {

struct Evaluated {
  int value = -1;
  int64_t max_nesting = 0;
  int64_t min_args = 1 << 30, max_args = 0;
  std::string problem;  // "" when the string is one well-formed expression
};

// A stack machine over the token TEXT (written independently of the generator, which
// builds a tree recursively): "[OP" opens a frame, a digit joins the open frame, "]"
// closes it and hands its value to the frame below. The median is found by counting
// (lower median = smallest v with #{x <= v} >= ceil(n/2), upper = smallest v with
// #{x <= v} >= floor(n/2) + 1), numpy's median truncated as LRA's int(np.median(...)).
Evaluated evaluate_text(const std::vector<std::string>& text) {
  struct Frame {
    std::string op;
    std::vector<int> args;
  };
  Evaluated r;
  std::vector<Frame> stack;
  bool done = false;
  for (const std::string& t : text) {
    if (done) {
      r.problem = "tokens after the expression closed";
      return r;
    }
    if (t == "[MAX" || t == "[MIN" || t == "[MED" || t == "[SM") {
      stack.push_back({t.substr(1), {}});
      r.max_nesting = std::max<int64_t>(r.max_nesting, static_cast<int64_t>(stack.size()));
    } else if (t.size() == 1 && t[0] >= '0' && t[0] <= '9') {
      if (stack.empty()) {
        r.problem = "a digit outside any operator";
        return r;
      }
      stack.back().args.push_back(t[0] - '0');
    } else if (t == "]") {
      if (stack.empty()) {
        r.problem = "unbalanced ]";
        return r;
      }
      Frame f = std::move(stack.back());
      stack.pop_back();
      const int64_t n = static_cast<int64_t>(f.args.size());
      r.min_args = std::min(r.min_args, n);
      r.max_args = std::max(r.max_args, n);
      int v = 0;
      if (f.op == "MAX") {
        v = -1;
        for (int a : f.args) v = a > v ? a : v;
      } else if (f.op == "MIN") {
        v = 10;
        for (int a : f.args) v = a < v ? a : v;
      } else if (f.op == "SM") {
        for (int a : f.args) v = (v + a) % 10;
      } else {
        auto smallest_with_count = [&](int64_t need) {
          for (int c = 0; c <= 9; ++c)
            if (std::count_if(f.args.begin(), f.args.end(), [c](int a) { return a <= c; }) >= need) return c;
          return -1;
        };
        const int lo = smallest_with_count((n + 1) / 2), hi = smallest_with_count(n / 2 + 1);
        v = (lo + hi) / 2;
      }
      if (stack.empty()) {
        r.value = v;
        done = true;
      } else {
        stack.back().args.push_back(v);
      }
    } else {
      r.problem = "unknown token " + t;
      return r;
    }
  }
  if (!done) r.problem = "the expression never closed";
  return r;
}

std::vector<std::string> text_of(const std::vector<int32_t>& ids) {
  std::vector<std::string> t;
  for (int32_t id : ids) t.push_back(listops_token_text(id));
  return t;
}

TEST(ListOpsEvaluator, KnownExpressions) {
  auto value = [](std::vector<std::string> t) { return evaluate_text(t).value; };
  EXPECT_EQ(value({"[MAX", "2", "9", "[MIN", "4", "7", "]", "0", "]"}), 9);
  EXPECT_EQ(value({"[SM", "8", "7", "[MAX", "1", "5", "]", "]"}), 0);  // 8 + 7 + 5 = 20
  EXPECT_EQ(value({"[MED", "1", "8", "4", "]"}), 4);
  EXPECT_EQ(value({"[MED", "1", "8", "4", "6", "]"}), 5);  // (4 + 6) / 2
  EXPECT_EQ(value({"[MED", "1", "8", "3", "6", "]"}), 4);  // int(4.5)
  EXPECT_FALSE(evaluate_text({"[MAX", "1", "2"}).problem.empty());
  EXPECT_FALSE(evaluate_text({"[MAX", "1", "]", "]"}).problem.empty());
}

TEST(ListOps, LabelsMatchAnIndependentEvaluator) {
  // LRA's defaults at three lengths, and a shallow narrow generator.
  struct Case {
    int64_t max_length, min_length, depth, arity, samples;
  };
  for (const Case c : {Case{128, 32, 10, 10, 3000}, Case{512, 128, 10, 10, 1000}, Case{2000, 500, 10, 10, 200},
                       Case{64, 4, 3, 4, 3000}}) {
    SCOPED_TRACE("max_length " + std::to_string(c.max_length) + " depth " + std::to_string(c.depth));
    ListOpsSpec spec;
    spec.max_length = c.max_length;
    spec.min_length = c.min_length;
    spec.depth = c.depth;
    spec.arity = c.arity;
    spec.data_seed = 11;
    std::array<int64_t, 10> labels{};
    int64_t deepest = 0, widest = 0, narrowest = 1 << 30;
    for (int split = 0; split < 2; ++split)
      for (int64_t i = 0; i < c.samples; ++i) {
        const ListOpsSample s = listops_sample(spec, split, i);
        const int64_t len = static_cast<int64_t>(s.tokens.size());
        ASSERT_GE(len, c.min_length);
        ASSERT_LE(len, c.max_length);
        const Evaluated e = evaluate_text(text_of(s.tokens));
        ASSERT_EQ(e.problem, "") << "sample " << i;
        ASSERT_EQ(e.value, s.label) << "split " << split << " sample " << i;
        ++labels[static_cast<size_t>(s.label)];
        deepest = std::max(deepest, e.max_nesting);
        widest = std::max(widest, e.max_args);
        narrowest = std::min(narrowest, e.min_args);
      }
    EXPECT_LE(deepest, c.depth);
    EXPECT_GE(deepest, std::min<int64_t>(c.depth, 3));  // nesting happens
    EXPECT_EQ(narrowest, 2);
    EXPECT_EQ(widest, c.arity);
    // Every label occurs and none dominates (LRA's majority class is below 20 %).
    const int64_t total = 2 * c.samples;
    for (int64_t n : labels) EXPECT_GT(n, 0);
    EXPECT_LT(static_cast<double>(*std::max_element(labels.begin(), labels.end())) / static_cast<double>(total), 0.3);
  }
}

TEST(ListOps, SeededAndSplitsDiffer) {
  ListOpsSpec spec;
  const ListOpsSample a = listops_sample(spec, 1, 5), b = listops_sample(spec, 1, 5);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.label, b.label);
  EXPECT_NE(listops_sample(spec, 0, 5).tokens, a.tokens);
  EXPECT_NE(listops_sample(spec, 1, 6).tokens, a.tokens);
  ListOpsSpec other = spec;
  other.data_seed = 1;
  EXPECT_NE(listops_sample(other, 1, 5).tokens, a.tokens);
  // Token ids are the task's vocabulary, padding id never inside an expression.
  for (int32_t id : a.tokens) {
    EXPECT_GT(id, kListOpsPad);
    EXPECT_LT(id, kListOpsVocab);
  }
}

TEST(ListOps, LongestExpressionAndImpossibleLengths) {
  EXPECT_EQ(listops_longest(1, 2), 4);                       // [OP d d ]
  EXPECT_EQ(listops_longest(2, 2), 10);                      // [OP [OP d d ] [OP d d ] ]
  EXPECT_EQ(listops_longest(10, 10), int64_t{12222222222});  // 10^10 + 2 (10^10 - 1) / 9
  EXPECT_EQ(listops_longest(64, 64), int64_t{1} << 62);      // saturates
  ListOpsSpec spec;
  spec.depth = 1;
  spec.arity = 3;
  spec.max_length = 100;
  spec.min_length = 6;  // [OP d d d ] is 5 tokens at most: never reached
  EXPECT_THROW(listops_sample(spec, 0, 0), std::runtime_error);
}

// The parameter table: LRA's defaults, and clear errors for what the generator cannot make.
TEST(ListOps, ParameterDefaultsAndErrors) {
  const json e = effective_config(json::parse(R"({"task": "listops", "prompt_length": 512})"), "cell.json");
  EXPECT_EQ(e["depth"], 10);
  EXPECT_EQ(e["arity"], 10);
  EXPECT_EQ(e["min_length"], 128);
  EXPECT_EQ(e["cls"], true);
  EXPECT_EQ(e["n_train"], 96000);
  EXPECT_EQ(e["n_test"], 2000);
  EXPECT_EQ(e["data_seed"], 0);
  EXPECT_FALSE(e.contains("nu"));
  auto error_of = [](const char* cell) {
    try {
      effective_config(json::parse(cell), "cell.json");
    } catch (const InputError& err) {
      return std::string(err.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of(R"({"task": "listops", "prompt_length": 3})"),
            "cell.json: prompt_length: 3 is less than task listops can make (the shortest expression, [MAX d d ], is "
            "4 tokens)");
  EXPECT_EQ(error_of(R"({"task": "listops", "prompt_length": 64, "min_length": 65})"),
            "cell.json: min_length: 65 is more than prompt_length 64");
  EXPECT_EQ(error_of(R"({"task": "listops", "prompt_length": 128, "depth": 2, "arity": 3, "min_length": 20})"),
            "cell.json: min_length: 20 is longer than any expression of depth 2 and arity 3 (at most 17 "
            "tokens)");
  EXPECT_EQ(error_of(R"({"task": "listops", "prompt_length": 128, "arity": 1})"),
            "cell.json: arity: expected an integer in 2..64, got 1");
}

TEST(Pde, ParameterDefaultsAndErrors) {
  const json e = effective_config(json::parse(R"({"task": "pde", "prompt_length": 64})"), "cell.json");
  EXPECT_EQ(e["nu"], 0.1);
  EXPECT_EQ(e["final_time"], 1.0);
  EXPECT_EQ(e["n_train"], 1000);
  EXPECT_EQ(e["n_test"], 200);
  EXPECT_FALSE(e.contains("cls"));  // every token is predicted: no CLS
  EXPECT_FALSE(e.contains("depth"));
  auto error_of = [](const char* cell) {
    try {
      effective_config(json::parse(cell), "cell.json");
    } catch (const InputError& err) {
      return std::string(err.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(error_of(R"({"task": "pde", "prompt_length": 2})"),
            "cell.json: prompt_length: 2 is less than task pde can make (at least 4 grid points)");
  EXPECT_EQ(error_of(R"({"task": "pde", "prompt_length": 64, "nu": 0})"),
            "cell.json: nu: expected a number in 0.01..100, got 0");
  EXPECT_EQ(error_of(R"({"task": "pde", "prompt_length": 9000})"),
            "cell.json: prompt_length: 9000 is more than task pde can make (4..8192)");
}

}  // namespace
}  // namespace attnsweep

namespace attnsweep {
namespace {

// The example grids load, and make the cells docs/results-paperA.md describes.
TEST(ListOpsPdeGrids, LoadWithTheirCellCounts) {
  const std::string dir = std::string(ATTNSWEEP_SOURCE_DIR) + "/experiments/grids/";
  const std::pair<const char*, size_t> grids[] = {
      {"lra_listops", 27},     {"lra_listops_small", 2}, {"lra_listops_cpu", 9},    {"paperA_pde", 24},
      {"paperA_pde_small", 2}, {"paperA_pde_cpu", 12},   {"lra_listops_n2000", 15}, {"lra_listops_n512_cpu", 15}};
  for (const auto& [name, cells] : grids) {
    const Grid g = load_grid(dir + name + ".json");
    EXPECT_EQ(g.name, name);
    EXPECT_EQ(g.cells.size(), cells) << name;
    std::set<std::string> acts;
    for (const auto& c : g.cells) {
      std::string a = c.config["activation"].get<std::string>();
      if (c.config.contains("scale")) {
        a += "/";
        const json& sc = c.config["scale"];
        a += sc.is_string() ? sc.get<std::string>() : sc.dump();
      }
      acts.insert(a);
    }
    const std::string n = name;
    if (n == "paperA_pde" || n == "paperA_pde_cpu") {
      EXPECT_EQ(acts, (std::set<std::string>{"softmax", "poly/inv_sqrt_n", "poly/none", "relu/inv_n"})) << n;
    }
    if (n == "lra_listops_n2000" || n == "lra_listops_n512_cpu") {  // issue #21's five, LRA's model
      EXPECT_EQ(acts, (std::set<std::string>{"softmax", "poly/inv_sqrt_n", "poly/0.07142857142857142", "relu/inv_n",
                                             "sigmoid"}))
          << n;
      for (const auto& c : g.cells) {
        EXPECT_EQ(c.config["layers"], 2) << n;
        EXPECT_EQ(c.config["heads"], 2) << n;
        EXPECT_EQ(c.config["dim"], 64) << n;
      }
    }
    if (n == "lra_listops" || n == "lra_listops_cpu") {
      EXPECT_EQ(acts, (std::set<std::string>{"softmax", "poly/inv_sqrt_n", "relu/inv_n"})) << n;
    }
  }
}

}  // namespace
}  // namespace attnsweep
