// The listops task: classify a generated ListOps expression (experiments/listops.h) into
// its value 0..9 with the classify transformer over token ids, padding masked.
#include "experiments/listops.h"

#include <algorithm>
#include <array>
#include <memory>
#include <stdexcept>

#include "experiments/registry.h"
#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "experiments/training_keys.h"

namespace attnsweep {

namespace {

// LRA's probability that an argument is itself an expression (when the depth allows).
constexpr double kBranchProbability = 0.25;
constexpr int64_t kMaxDraws = 1000000;

struct Overflow {};  // the expression outgrew max_length: draw another

class Generator {
 public:
  Generator(const ListOpsSpec& spec, Rng& rng, std::vector<int32_t>& out) : spec_(spec), rng_(rng), out_(out) {}

  // An expression at nesting level `level` (1 = the root); returns its value.
  int32_t expression(int64_t level) {
    const int32_t op = kListOpsMax + static_cast<int32_t>(rng_.uniform() * 4.0);
    push(op);
    const int64_t n = 2 + static_cast<int64_t>(rng_.uniform() * static_cast<double>(spec_.arity - 1));
    std::vector<int32_t> values;
    values.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (level < spec_.depth && rng_.uniform() < kBranchProbability) {
        values.push_back(expression(level + 1));
      } else {
        const int32_t d = static_cast<int32_t>(rng_.uniform() * 10.0);
        push(kListOpsDigit0 + d);
        values.push_back(d);
      }
    }
    push(kListOpsClose);
    return apply(op, values);
  }

 private:
  void push(int32_t id) {
    if (static_cast<int64_t>(out_.size()) >= spec_.max_length) throw Overflow{};
    out_.push_back(id);
  }
  static int32_t apply(int32_t op, std::vector<int32_t>& v) {
    switch (op) {
      case kListOpsMax: return *std::max_element(v.begin(), v.end());
      case kListOpsMin: return *std::min_element(v.begin(), v.end());
      case kListOpsSum: {
        int64_t s = 0;
        for (int32_t x : v) s += x;
        return static_cast<int32_t>(s % 10);
      }
      default: {  // median
        std::sort(v.begin(), v.end());
        const size_t n = v.size();
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
      }
    }
  }
  const ListOpsSpec& spec_;
  Rng& rng_;
  std::vector<int32_t>& out_;
};

}  // namespace

int64_t listops_longest(int64_t depth, int64_t arity) {
  // longest(1) = arity + 2 digits and brackets; longest(d) = 2 + arity * longest(d - 1).
  constexpr int64_t kCap = int64_t{1} << 62;
  int64_t len = 1;  // a digit
  for (int64_t d = 0; d < depth; ++d) {
    if (len > (kCap - 2) / arity) return kCap;
    len = 2 + arity * len;
  }
  return len;
}

ListOpsSample listops_sample(const ListOpsSpec& spec, int split, int64_t index) {
  Rng rng(seed_of({spec.data_seed, 0x115705ull, static_cast<uint64_t>(split), static_cast<uint64_t>(index)}));
  ListOpsSample s;
  s.tokens.reserve(static_cast<size_t>(spec.max_length));
  for (int64_t draw = 0; draw < kMaxDraws; ++draw) {
    s.tokens.clear();
    try {
      s.label = Generator(spec, rng, s.tokens).expression(1);
    } catch (const Overflow&) {
      continue;
    }
    if (static_cast<int64_t>(s.tokens.size()) >= spec.min_length) return s;
  }
  throw std::runtime_error("listops: no expression of length " + std::to_string(spec.min_length) + ".." +
                           std::to_string(spec.max_length) + " in " + std::to_string(kMaxDraws) + " draws (depth " +
                           std::to_string(spec.depth) + ", arity " + std::to_string(spec.arity) +
                           "): lower min_length or raise depth/arity");
}

std::string listops_token_text(int32_t id) {
  if (id == kListOpsPad) return "<pad>";
  if (id >= kListOpsDigit0 && id < kListOpsDigit0 + 10) return std::to_string(id - kListOpsDigit0);
  switch (id) {
    case kListOpsMax: return "[MAX";
    case kListOpsMin: return "[MIN";
    case kListOpsMed: return "[MED";
    case kListOpsSum: return "[SM";
    case kListOpsClose: return "]";
    default: {
      std::string s = "<unknown ";  // built by appends: GCC 12 warns (-Wrestrict) on "<" + std::string
      s += std::to_string(id);
      s += ">";
      return s;
    }
  }
}

// Token ids of sequences up to prompt_length long, padded at the end; 10 classes.
static DataShape listops_data_shape(const json& config) {
  DataShape s;
  s.tokens = config.at("prompt_length").get<int64_t>();
  s.in_dim = 1;
  s.classes = 10;
  s.vocab = kListOpsVocab;
  s.pad_id = kListOpsPad;
  return s;
}

TaskOutput run_listops(const json& config, const TaskContext& ctx) {
  ListOpsSpec spec;
  spec.max_length = config.at("prompt_length").get<int64_t>();
  spec.min_length = config.at("min_length").get<int64_t>();
  spec.depth = config.at("depth").get<int64_t>();
  spec.arity = config.at("arity").get<int64_t>();
  spec.data_seed = config.at("data_seed").get<uint64_t>();
  if (spec.arity < 2 || spec.depth < 1 || spec.max_length < 4 || spec.min_length > spec.max_length)
    throw std::runtime_error("listops: needs arity >= 2, depth >= 1, 4 <= prompt_length, min_length <= prompt_length");
  if (!ctx.train) throw std::runtime_error("task listops: no trainer supplied (run it through attnsweep train)");

  TrainingData data;
  static_cast<DataShape&>(data) = listops_data_shape(config);  // tokens: spec.max_length
  data.n_train = config.at("n_train").get<int64_t>();
  data.n_test = config.at("n_test").get<int64_t>();

  // The test split once: its class counts give the majority baseline.
  auto test = std::make_shared<std::vector<ListOpsSample>>(static_cast<size_t>(data.n_test));
  std::array<int64_t, 10> counts{};
  double mean_length = 0;
  for (int64_t i = 0; i < data.n_test; ++i) {
    (*test)[static_cast<size_t>(i)] = listops_sample(spec, 1, i);
    ++counts[static_cast<size_t>((*test)[static_cast<size_t>(i)].label)];
    mean_length += static_cast<double>((*test)[static_cast<size_t>(i)].tokens.size());
  }
  data.fill = [spec, test](int split, const int64_t* idx, int64_t count, float* x, int32_t* y_class, float*) {
    const int64_t N = spec.max_length;
    for (int64_t i = 0; i < count; ++i) {
      const ListOpsSample s = split == 1 ? (*test)[static_cast<size_t>(idx[i])] : listops_sample(spec, 0, idx[i]);
      float* row = x + i * N;
      std::fill(row, row + N, static_cast<float>(kListOpsPad));
      for (size_t t = 0; t < s.tokens.size(); ++t) row[t] = static_cast<float>(s.tokens[t]);
      y_class[i] = s.label;
    }
  };
  TaskOutput out = ctx.train(config, ctx, data);
  const double n = static_cast<double>(std::max<int64_t>(data.n_test, 1));
  out.final_metrics["majority_accuracy"] = static_cast<double>(*std::max_element(counts.begin(), counts.end())) / n;
  out.final_metrics["test_mean_length"] = mean_length / n;
  out.series.push_back(
      result_series("/listops/test_class_counts", {10}, std::vector<int64_t>(counts.begin(), counts.end())));
  return out;
}

const TaskDef& listops_task() {
  static const TaskDef t = [] {
    TaskDef d;
    d.name = "listops";
    d.description = "Long Range Arena's ListOps, generated, padded to the prompt length (LRA: 2000)";
    d.min_prompt_length = 4;
    d.min_prompt_why = "the shortest expression, [MAX d d ], is 4 tokens";
    d.max_prompt_length = 16384;
    d.model = TaskModel::transformer;
    d.target = TaskTarget::classes;
    // The data's sizes and seed are the data's alone, so that cells with different
    // `seed` or `init_seed` share one test set; the generator's defaults are LRA's.
    d.keys = {boolean_key("cls", true, "classify from a learned CLS token instead of the mean over tokens"),
              seed_following_key("data_seed", "seed of the generated train and test samples"),
              integer_key("n_train", 1, 1e9, 96000, "training samples (LRA: 96000)"),
              integer_key("n_test", 1, 1e9, 2000, "test samples, fixed per data_seed (LRA: 2000)"),
              integer_key("depth", 1, 64, 10, "most nested operators of a ListOps expression"),
              integer_key("arity", 2, 64, 10, "most arguments of a ListOps operator")};
    ParamSpec min_length =
        integer_key("min_length", 1, kNoBound, json(),
                    "shortest expression in tokens (default prompt_length / 4, as LRA's 500 of 2000)");
    min_length.default_value = [](const json& cfg) {
      // A missing prompt_length is reported as such; the 4 only keeps this row quiet.
      return json(std::max<int64_t>(1, cfg.value("prompt_length", int64_t{4}) / 4));
    };
    min_length.check = [](const json& value, const json& cfg) -> std::string {
      const int64_t m = value.get<int64_t>(), n = cfg.value("prompt_length", int64_t{0});  // 0: missing, reported
      const int64_t depth = cfg.at("depth").get<int64_t>(), arity = cfg.at("arity").get<int64_t>();
      if (m > n) return value.dump() + " is more than prompt_length " + std::to_string(n);
      if (const int64_t longest = listops_longest(depth, arity); m > longest)
        return value.dump() + " is longer than any expression of depth " + std::to_string(depth) + " and arity " +
               std::to_string(arity) + " (at most " + std::to_string(longest) + " tokens)";
      return "";
    };
    d.keys.push_back(std::move(min_length));
    d.cost_s = [](const json& c) { return transformer_cost_s(c, c.at("n_test").get<double>()); };
    d.data_shape = listops_data_shape;
    d.outputs = {make_final_metric("majority_accuracy", "largest share of one label in the test split (the baseline)"),
                 make_final_metric("test_mean_length", "mean length in tokens of the test split's sequences"),
                 make_dataset("/listops/test_class_counts", ResultType::int64, {"classes"},
                              "test-split samples per label 0..9 (the majority baseline is the largest share)", false)};
    d.run = run_listops;
    return d;
  }();
  return t;
}

}  // namespace attnsweep
