#include "results/paired.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "kernels/activation.h"
#include "results/fits.h"
#include "results/table.h"

namespace attnsweep {
namespace {
using json = nlohmann::json;

// A cell's activation as the keys that name it, and its place in the registry's order.
struct Spec {
  std::string label;
  std::tuple<int32_t, double, int32_t, double> order;
};
std::optional<Spec> spec_of(const std::map<std::string, json>& params) {
  auto it = params.find("activation");
  if (it == params.end() || !it->second.is_string()) return std::nullopt;
  auto c = params.find("scale");
  const std::string scale_name = c != params.end() && c->second.is_string() ? c->second.get<std::string>() : "";
  const std::optional<ActivationNames> names = look_up_activation(it->second.get<std::string>(), scale_name);
  if (!names) return std::nullopt;
  const ActivationInfo& info = activation_info(names->activation);
  Spec s;
  s.label = "activation=" + std::string(info.name);
  double degree = 0, scale_value = 0;
  int32_t scale_rank = 0;
  if (info.takes_degree) {
    auto d = params.find("degree");
    if (d != params.end()) {
      s.label += " degree=" + label_value(d->second);
      if (d->second.is_number()) degree = d->second.get<double>();
    }
  }
  if (info.takes_scale && c != params.end()) {
    s.label += " scale=" + label_value(c->second);
    if (c->second.is_number()) {
      scale_rank = static_cast<int32_t>(kScales.size());
      scale_value = c->second.get<double>();
    } else if (names->scale) {
      scale_rank = static_cast<int32_t>(*names->scale);
    }
  }
  s.order = {static_cast<int32_t>(names->activation), degree, scale_rank, scale_value};
  return s;
}

bool activation_key(const std::string& k) {
  return k == "activation" || k == "degree" || k == "scale";
}

}  // namespace

std::string paired_spec(const std::map<std::string, json>& params) {
  auto s = spec_of(params);
  return s ? s->label : std::string();
}

std::string paired_group(const std::map<std::string, json>& params) {
  return group_label(params, activation_key);
}

namespace {
struct Key {  // one comparison
  std::string group;
  double n;
  std::tuple<int32_t, double, int32_t, double> order_a, order_b;
  std::string a, b, metric;
  // A NaN prompt length (cells without one) compares as the lowest: NaN in a std::map key
  // would make every comparison of one group equivalent, merging its metrics into one row.
  auto tie() const {
    return std::make_tuple(group, std::isnan(n) ? -std::numeric_limits<double>::infinity() : n, order_a, a, order_b, b,
                           metric);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};
}  // namespace

std::vector<PairedDiff> paired_differences(const std::vector<CellRow>& cells) {
  // pair key (every parameter but the activation's) -> activation label -> cell
  struct Member {
    Spec spec;
    const CellRow* cell;
  };
  std::map<std::string, std::vector<Member>> pairs;
  std::map<std::string, std::pair<std::string, double>> where;  // pair key -> (group, prompt_length)
  for (const CellRow& c : cells) {
    if (!c.complete) continue;
    auto spec = spec_of(c.params);
    if (!spec) continue;
    std::string key;  // every parameter but the activation's, seeds included
    for (const auto& [k, v] : c.params)
      if (!activation_key(k)) key += k + "=" + v.dump() + "\n";
    auto n = c.params.find("prompt_length");
    const double length = n != c.params.end() && n->second.is_number() ? n->second.get<double>() : kNaN;
    const std::string group = paired_group(c.params);
    std::vector<Member>& m = pairs[key];
    if (std::none_of(m.begin(), m.end(), [&](const Member& x) { return x.spec.label == spec->label; }))
      m.push_back({*spec, &c});
    where[key] = {group, length};
  }
  std::map<Key, std::vector<std::pair<double, double>>> values;
  for (auto& [key, members] : pairs) {
    std::sort(members.begin(), members.end(), [](const Member& x, const Member& y) {
      return std::tie(x.spec.order, x.spec.label) < std::tie(y.spec.order, y.spec.label);
    });
    for (size_t i = 0; i < members.size(); ++i)
      for (size_t j = i + 1; j < members.size(); ++j)
        for (const auto& [metric, va] : members[i].cell->metrics) {
          auto vb = members[j].cell->metrics.find(metric);
          if (vb == members[j].cell->metrics.end() || !std::isfinite(va) || !std::isfinite(vb->second)) continue;
          Key k{where[key].first,
                where[key].second,
                members[i].spec.order,
                members[j].spec.order,
                members[i].spec.label,
                members[j].spec.label,
                metric};
          values[k].emplace_back(va, vb->second);
        }
  }
  std::vector<PairedDiff> out;
  for (const auto& [k, v] : values) {
    PairedDiff d;
    d.metric = k.metric;
    d.group = k.group;
    d.prompt_length = k.n;
    d.a = k.a;
    d.b = k.b;
    d.pairs = static_cast<int64_t>(v.size());
    double sa = 0, sb = 0;
    for (const auto& [x, y] : v) {
      sa += x;
      sb += y;
      d.a_lower += x < y;
    }
    const double m = static_cast<double>(v.size());
    d.mean_a = sa / m;
    d.mean_b = sb / m;
    d.mean_diff = d.mean_a - d.mean_b;
    if (v.size() >= 2) {
      double ss = 0;
      for (const auto& [x, y] : v) ss += (x - y - d.mean_diff) * (x - y - d.mean_diff);
      d.sd_diff = std::sqrt(ss / (m - 1));
      d.ci95 = student_t_quantile(0.975, m - 1) * d.sd_diff / std::sqrt(m);
    } else {
      d.sd_diff = d.ci95 = kNaN;
    }
    out.push_back(std::move(d));
  }
  return out;
}

namespace {
std::vector<Column> paired_columns(const std::vector<PairedDiff>& diffs) {
  return {
      string_column("metric", "/final metric compared", column_of<std::string>(diffs, &PairedDiff::metric)),
      string_column("group", "the other parameters but the seeds and prompt_length, k=v in key order",
                    column_of<std::string>(diffs, &PairedDiff::group)),
      float_column("prompt_length", "prompt_length of the pairs (NaN when the cells have none)",
                   column_of<double>(diffs, &PairedDiff::prompt_length)),
      string_column("a", "first activation (registry order), k=v", column_of<std::string>(diffs, &PairedDiff::a)),
      string_column("b", "second activation, k=v", column_of<std::string>(diffs, &PairedDiff::b)),
      int_column("pairs", "pairs of cells equal in every parameter but the activation",
                 column_of<int64_t>(diffs, &PairedDiff::pairs)),
      float_column("mean_a", "mean of the metric over a's cells", column_of<double>(diffs, &PairedDiff::mean_a)),
      float_column("mean_b", "mean of the metric over b's cells", column_of<double>(diffs, &PairedDiff::mean_b)),
      float_column("mean_diff", "mean over pairs of metric(a) - metric(b)",
                   column_of<double>(diffs, &PairedDiff::mean_diff)),
      float_column("sd_diff", "standard deviation of the paired differences (NaN below 2 pairs)",
                   column_of<double>(diffs, &PairedDiff::sd_diff)),
      float_column("ci95", "half-width of the 95% Student-t interval of mean_diff (NaN below 2 pairs)",
                   column_of<double>(diffs, &PairedDiff::ci95)),
      int_column("a_lower", "pairs where a's metric is below b's", column_of<int64_t>(diffs, &PairedDiff::a_lower)),
  };
}
}  // namespace

void write_paired(const std::string& csv_path, const std::vector<PairedDiff>& diffs) {
  write_csv(csv_path, paired_columns(diffs), diffs.size());
}

void write_paired_group(h5::File& f, const std::vector<PairedDiff>& diffs) {
  h5::Group g = f.require_group("/paired");
  for (const Column& c : paired_columns(diffs)) write_column(g, c);
}

}  // namespace attnsweep
