// Pass 1's rows of aggregate (results/aggregate_rows.h): flattened configs, the
// trajectories a cell file holds, and the /cells columns.
#include "results/aggregate_rows.h"
#include "results/table.h"

#include <algorithm>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>
#include <variant>

#include "experiments/result_schema.h"

namespace attnsweep::aggregation {
namespace {}  // namespace

void flatten(const json& j, const std::string& prefix, std::map<std::string, json>& out) {
  for (const auto& [k, v] : j.items()) {
    std::string key = prefix.empty() ? k : prefix + "." + k;
    std::replace(key.begin(), key.end(), '/', '_');
    if (v.is_object() && !v.empty())
      flatten(v, key, out);
    else
      out[key] = v;
  }
}

void merge_shape(std::vector<uint64_t>& into, const std::vector<uint64_t>& shape) {
  if (into.empty()) into.assign(shape.size(), 0);
  for (size_t i = 0; i < shape.size() && i < into.size(); ++i) into[i] = std::max(into[i], shape[i]);
}

void find_trajectories(const h5::Group& group, size_t rank, std::vector<TrajectorySource>& out,
                       std::map<std::string, TrajectoryInfo>& info,
                       const std::map<std::string, TrajectoryInfo>& known) {
  for (const std::string& child : group.children()) {
    auto member = group.open_member(child);  // opened once: this walk is most of pass 1
    if (auto* g = std::get_if<h5::Group>(&member)) {
      find_trajectories(*g, rank, out, info, known);
    } else if (auto* ds = std::get_if<h5::Dataset>(&member)) {
      const h5::Dataset& d = *ds;
      auto shape = d.shape();
      if (shape.size() != rank || (d.kind() != h5::Kind::Float && d.kind() != h5::Kind::Integer)) continue;
      std::string name = d.path().substr(1);
      std::replace(name.begin(), name.end(), '/', '_');
      out.push_back({name, d.path(), shape});
      TrajectoryInfo& t = info[name];
      merge_shape(t.shape, shape);
      auto k = known.find(name);
      if (k != known.end() && !k->second.description.empty()) t.description = k->second.description;
      if (t.description.empty() && d.has_attribute("description")) {
        auto a = d.attribute("description");
        if (a.kind() == h5::Kind::String) t.description = a.read_string();
      }
    }
  }
}

std::vector<Column> build_columns(const std::vector<Row>& rows) {
  std::vector<Column> cols;
  auto pick = [&](auto get) {
    std::vector<std::string> v;
    for (const Row& r : rows) v.push_back(get(r));
    return v;
  };
  // The fixed columns: the root attributes the result schema marks as columns.
  for (const ResultField* f : result_columns()) {
    Column c{Column::String, f->name, f->description, {}, {}, {}, {}};
    const auto want = [&](ResultType t) {
      if (f->type != t) throw std::logic_error("aggregate: column " + f->name + " has another type in the schema");
    };
    if (f->name == "cell_id" || f->name == "status" || f->name == "device") {
      want(ResultType::string);
      c.strings = pick([&](const Row& r) {
        return f->name == "cell_id"  ? r.summary.cell_id
               : f->name == "status" ? std::string(to_string(r.summary.status))
                                     : r.summary.device;
      });
    } else if (f->name == "wall_seconds") {
      want(ResultType::float64);
      c.type = Column::Float;
      for (const Row& r : rows) c.floats.push_back(r.summary.wall_seconds);
    } else if (f->name == "diverged_at_step") {
      want(ResultType::int64);
      c.type = Column::Int;
      for (const Row& r : rows) c.ints.push_back(r.summary.diverged_at_step);
    } else {
      throw std::logic_error("aggregate: the result schema's column " + f->name + " is not in a cell's summary");
    }
    cols.push_back(std::move(c));
  }

  std::set<std::string> taken;
  for (const Column& c : cols) taken.insert(c.name);
  std::set<std::string> param_keys, metric_keys;
  for (const Row& r : rows) {
    for (const auto& kv : r.params) param_keys.insert(kv.first);
    for (const auto& kv : r.summary.final_metrics) metric_keys.insert(kv.first);
  }
  for (const std::string& key : param_keys) {
    std::vector<json> values;
    bool named = false;  // some value is a string
    for (const Row& r : rows) {
      auto it = r.params.find(key);
      values.push_back(it == r.params.end() ? json() : it->second);
      named |= values.back().is_string();
    }
    // A cell whose activation takes no scale (softmax, sigmoid) has none in its config;
    // among named scales it is `none`, so that grouping by scale keeps it (a numeric
    // scale column keeps NaN: a string there would turn the column into text).
    if (key == "scale" && named)
      for (json& v : values)
        if (v.is_null()) v = "none";
    std::string name = taken.count(key) ? "config." + key : key;  // never shadow a fixed column
    taken.insert(name);
    Column c = json_column(name, "config parameter " + key, values);
    c.missing_csv = kNotApplicable;  // summary.csv only: aggregate.h5's /cells keeps NaN / ""
    cols.push_back(std::move(c));
  }
  for (const std::string& key : metric_keys) {
    Column c{Column::Float,
             taken.count(key) ? "final." + key : key,
             "final metric (/final attribute " + key + ")",
             {},
             {},
             {},
             {}};
    taken.insert(c.name);
    for (const Row& r : rows) {
      auto it = r.summary.final_metrics.find(key);
      c.floats.push_back(it == r.summary.final_metrics.end() ? kNaN : it->second);
    }
    cols.push_back(std::move(c));
  }
  // The activation as the report names it (results/table.h activation_label).
  cols.push_back(string_column(taken.count("label") ? "activation_label" : "label",
                               "the activation as the report names it (softmax, s³/√N, ReLU/N)",
                               pick([](const Row& r) { return activation_label(r.params); })));
  return cols;
}

}  // namespace attnsweep::aggregation
