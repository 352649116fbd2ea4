#include "results/claims.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "experiments/param_spec.h"
#include "experiments/params.h"
#include "results/table.h"

namespace attnsweep {
using json = nlohmann::json;

namespace {

using Problems = std::vector<std::pair<std::string, std::string>>;

const std::vector<std::string> kFields = {"id",    "statement", "kind",      "metric", "paper",  "where",
                                          "a",     "b",         "pair_by",   "x",      "over",   "log_x",
                                          "log_y", "direction", "threshold", "margin", "expect", "tolerance"};

// Which fields each kind takes beyond the common ones (id, statement, kind, metric, paper, where, pair_by).
std::vector<std::string> kind_fields(const std::string& kind) {
  if (kind == "difference") return {"a", "b", "direction", "threshold"};
  if (kind == "equivalence") return {"a", "b", "margin"};
  if (kind == "difference_trend") return {"a", "b", "x", "log_x", "direction"};
  if (kind == "slope") return {"x", "log_x", "log_y", "expect", "tolerance"};
  if (kind == "trend") return {"x", "log_x", "log_y", "direction"};
  return {"x", "over", "expect", "tolerance"};  // argmax_slope, argmin_slope
}

std::string describe(const json& v) {
  return describe_value(v);
}

bool is_group(const json& g) {
  if (!g.is_object() || g.empty()) return false;
  for (const auto& [k, v] : g.items()) {
    if (v.is_object() || v.is_null()) return false;
    if (v.is_array() && (v.empty() || std::any_of(v.begin(), v.end(), [](const json& e) {
                           return e.is_object() || e.is_array() || e.is_null();
                         })))
      return false;
  }
  return true;
}

std::string units_text(size_t n) {
  return std::to_string(n) + (n == 1 ? " unit" : " units");
}

}  // namespace

const std::string& ClaimCell::get(const std::string& key) const {
  static const std::string empty;
  auto it = values.find(key);
  return it == values.end() ? empty : it->second;
}

double claim_number(const std::string& text) {
  if (text.empty()) return NAN;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  return *end == '\0' ? v : NAN;
}

bool claim_value_matches(const json& want, const std::string& have) {
  if (have.empty()) return false;
  if (want.is_array())
    return std::any_of(want.begin(), want.end(), [&](const json& w) { return label_value(w) == have; });
  return label_value(want) == have;
}

std::vector<Claim> parse_claims(const json& list, Problems& problems) {
  std::vector<Claim> out;
  if (!list.is_array()) {
    problems.emplace_back("claims", "expected a list of claims (objects), got " + describe(list));
    return out;
  }
  std::set<std::string> ids;
  const std::vector<std::string> kinds(std::begin(kClaimKinds), std::end(kClaimKinds));
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string at = "claims[" + std::to_string(i) + "]";
    const json& j = list[i];
    if (!j.is_object()) {
      problems.emplace_back(at, "expected an object (a claim), got " + describe(j));
      continue;
    }
    Claim c;
    c.source = j;
    const size_t before = problems.size();
    auto text = [&](const char* key, bool required, std::string& into) {
      if (!j.contains(key)) {
        if (required) problems.emplace_back(at, std::string("missing ") + key);
        return;
      }
      if (!j[key].is_string() || j[key].get<std::string>().empty())
        problems.emplace_back(at + "." + key, "expected a non-empty string, got " + describe(j[key]));
      else
        into = j[key].get<std::string>();
    };
    text("id", true, c.id);
    text("statement", true, c.statement);
    text("kind", true, c.kind);
    text("metric", true, c.metric);
    text("paper", false, c.paper);
    if (!c.id.empty()) {
      if (std::any_of(c.id.begin(), c.id.end(), [](char ch) {
            return !(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.' || ch == '-');
          }))
        problems.emplace_back(at + ".id", "expected letters, digits, '_', '.' or '-', got " + describe(j["id"]));
      else if (!ids.insert(c.id).second)
        problems.emplace_back(at + ".id", "\"" + c.id + "\" is the id of an earlier claim: ids are unique");
    }
    if (!c.kind.empty() && std::find(kinds.begin(), kinds.end(), c.kind) == kinds.end()) {
      const std::string s = closest_match(c.kind, kinds);
      std::string names;
      for (const std::string& k : kinds) names += (names.empty() ? "" : ", ") + k;
      problems.emplace_back(at + ".kind", "expected one of " + names + ", got " + describe(j["kind"]) +
                                              (s.empty() ? "" : " (did you mean \"" + s + "\"?)"));
      continue;
    }
    // Fields: every one known, and taken by this kind.
    const std::vector<std::string> own = c.kind.empty() ? std::vector<std::string>{} : kind_fields(c.kind);
    for (const auto& [k, v] : j.items()) {
      if (std::find(kFields.begin(), kFields.end(), k) == kFields.end()) {
        const std::string s = closest_match(k, kFields);
        problems.emplace_back(at + "." + k, "unknown key" + (s.empty() ? "" : " (did you mean \"" + s + "\"?)"));
      } else if (!c.kind.empty() && std::find(own.begin(), own.end(), k) == own.end() &&
                 std::find(kFields.begin(), kFields.begin() + 6, k) == kFields.begin() + 6 && k != "pair_by") {
        problems.emplace_back(at + "." + k, "a " + c.kind + " claim does not take " + k);
      }
    }
    if (j.contains("where")) {
      if (!j["where"].is_object() || (!j["where"].empty() && !is_group(j["where"])))
        problems.emplace_back(at + ".where",
                              "expected an object of key -> value or list of values, got " + describe(j["where"]));
      else
        c.where = j["where"];
    }
    if (!j.contains("pair_by")) {
      problems.emplace_back(at, "missing pair_by (the keys whose values make a unit, e.g. [\"seed\"])");
    } else if (!j["pair_by"].is_array() || j["pair_by"].empty() ||
               std::any_of(j["pair_by"].begin(), j["pair_by"].end(), [](const json& e) { return !e.is_string(); })) {
      problems.emplace_back(at + ".pair_by", "expected a non-empty list of keys, got " + describe(j["pair_by"]));
    } else {
      c.pair_by = j["pair_by"].get<std::vector<std::string>>();
    }
    auto number = [&](const char* key, bool required, double& into, bool positive) {
      if (!j.contains(key)) {
        if (required) problems.emplace_back(at, std::string("missing ") + key + " (a " + c.kind + " claim needs it)");
        return;
      }
      if (!j[key].is_number() || !std::isfinite(j[key].get<double>()) || (positive && !(j[key].get<double>() > 0)) ||
          (!positive && std::string(key) == "threshold" && j[key].get<double>() < 0))
        problems.emplace_back(at + "." + key, std::string("expected a ") + (positive ? "positive " : "") +
                                                  (std::string(key) == "threshold" ? "number >= 0" : "number") +
                                                  ", got " + describe(j[key]));
      else
        into = j[key].get<double>();
    };
    auto flag = [&](const char* key, bool& into) {
      if (!j.contains(key)) return;
      if (!j[key].is_boolean())
        problems.emplace_back(at + "." + key, "expected true or false, got " + describe(j[key]));
      else
        into = j[key].get<bool>();
    };
    auto direction = [&](std::vector<std::string> allowed) {
      if (!j.contains("direction")) {
        problems.emplace_back(at, "missing direction (\"" + allowed[0] + "\" or \"" + allowed[1] + "\")");
        return;
      }
      const json& d = j["direction"];
      if (!d.is_string() || std::find(allowed.begin(), allowed.end(), d.get<std::string>()) == allowed.end())
        problems.emplace_back(at + ".direction",
                              "expected \"" + allowed[0] + "\" or \"" + allowed[1] + "\", got " + describe(d));
      else
        c.direction = d.get<std::string>();
    };
    if (c.compares_groups()) {
      for (const char* g : {"a", "b"}) {
        if (!j.contains(g))
          problems.emplace_back(at, std::string("missing ") + g +
                                        " (the group compared: key -> value, e.g. "
                                        "{\"activation\": \"softmax\"})");
        else if (!is_group(j[g]))
          problems.emplace_back(at + "." + g,
                                "expected a non-empty object of key -> value or list of values, got " + describe(j[g]));
      }
      if (j.contains("a") && j.contains("b") && j["a"] == j["b"])
        problems.emplace_back(at + ".b", "the same group as a: a claim compares two different groups");
      c.a = j.value("a", json());
      c.b = j.value("b", json());
      if (c.kind == "difference") {
        direction({"a > b", "a < b"});
        number("threshold", false, c.threshold, false);
      } else if (c.kind == "equivalence") {
        number("margin", true, c.margin, true);
      } else {  // difference_trend
        text("x", true, c.x);
        c.log_y = false;
        direction({"increasing", "decreasing"});
        flag("log_x", c.log_x);
      }
    } else if (!c.kind.empty()) {
      text("x", true, c.x);
      if (c.kind == "trend") {
        c.log_y = false;
        direction({"increasing", "decreasing"});
      } else {
        number("expect", true, c.expect, false);
        number("tolerance", true, c.tolerance, true);
      }
      if (c.scans()) {
        text("over", true, c.over);
        if (!c.over.empty() && c.over == c.x) problems.emplace_back(at + ".over", "the same key as x");
      } else {
        flag("log_x", c.log_x);
        flag("log_y", c.log_y);
      }
    }
    if (problems.size() == before) out.push_back(std::move(c));
  }
  return out;
}

namespace {
json described(json schema, const char* description) {
  schema["description"] = description;
  return schema;
}
}  // namespace

json claims_json_schema() {
  const json text = {{"type", "string"}, {"minLength", 1}};
  const json value = {{"type", {"string", "number", "integer", "boolean"}}};
  const json group = {
      {"type", "object"},
      {"minProperties", 1},
      {"additionalProperties", {{"anyOf", {value, {{"type", "array"}, {"minItems", 1}, {"items", value}}}}}}};
  json where = described(group, "the claim's cells: key -> value or values");
  where["minProperties"] = 0;
  json kinds = json::array();
  for (const char* k : kClaimKinds) kinds.push_back(k);
  json props = {
      {"id", {{"type", "string"}, {"pattern", "^[A-Za-z0-9_.-]+$"}, {"description", "unique within the grid"}}},
      {"statement", described(text, "the paper's statement, in words")},
      {"kind", {{"enum", kinds}, {"description", "what is estimated (docs/grid-format.md#claims)"}}},
      {"metric", described(text, "a final metric of the cells (a summary.csv column)")},
      {"paper", described(text, "the paper's setting: model, data, budget, N")},
      {"where", where},
      {"a", described(group, "difference, equivalence: the first group")},
      {"b", described(group, "difference, equivalence: the second group")},
      {"pair_by",
       {{"type", "array"}, {"minItems", 1}, {"items", text}, {"description", "the keys whose values make a unit"}}},
      {"x", described(text, "slope, trend, argmax_slope, argmin_slope: the key on the x axis")},
      {"over", described(text, "argmax_slope, argmin_slope: the key scanned for the best value")},
      {"log_x", {{"type", "boolean"}, {"description", "slope, trend: log of x (default true)"}}},
      {"log_y", {{"type", "boolean"}, {"description", "slope: log of the metric (default true; trend: false)"}}},
      {"direction", {{"enum", {"a > b", "a < b", "increasing", "decreasing"}}}},
      {"threshold", {{"type", "number"}, {"minimum", 0}, {"description", "difference: the least difference claimed"}}},
      {"margin", {{"type", "number"}, {"exclusiveMinimum", 0}, {"description", "equivalence: ± margin"}}},
      {"expect", {{"type", "number"}, {"description", "slope, argmax_slope, argmin_slope: the slope claimed"}}},
      {"tolerance", {{"type", "number"}, {"exclusiveMinimum", 0}, {"description", "the slope's tolerance"}}},
  };
  json rules = json::array();
  for (const char* k : kClaimKinds) {
    json req = json::array();
    for (const std::string& f : kind_fields(k))
      if (f != "log_x" && f != "log_y" && f != "threshold") req.push_back(f);
    rules.push_back({{"if", {{"properties", {{"kind", {{"const", k}}}}}}}, {"then", {{"required", req}}}});
  }
  return {
      {"type", "array"},
      {"description", "claims declared before the run, decided by `attnsweep verdict` (docs/grid-format.md#claims)"},
      {"items",
       {{"type", "object"},
        {"properties", props},
        {"required", {"id", "statement", "kind", "metric", "pair_by"}},
        {"additionalProperties", false},
        {"allOf", rules}}}};
}

std::vector<std::pair<std::string, std::string>> claim_keys(const Claim& c, size_t index) {
  const std::string at = "claims[" + std::to_string(index) + "]";
  std::vector<std::pair<std::string, std::string>> keys;
  for (const auto& [k, v] : c.where.items()) keys.emplace_back(at + ".where." + k, k);
  if (c.compares_groups()) {
    for (const auto& [k, v] : c.a.items()) keys.emplace_back(at + ".a." + k, k);
    for (const auto& [k, v] : c.b.items()) keys.emplace_back(at + ".b." + k, k);
  }
  for (size_t i = 0; i < c.pair_by.size(); ++i)
    keys.emplace_back(at + ".pair_by[" + std::to_string(i) + "]", c.pair_by[i]);
  if (!c.x.empty()) keys.emplace_back(at + ".x", c.x);
  if (!c.over.empty()) keys.emplace_back(at + ".over", c.over);
  return keys;
}

namespace {

bool matches_group(const json& group, const ClaimCell& cell) {
  for (const auto& [k, v] : group.items())
    if (!claim_value_matches(v, cell.get(k))) return false;
  return true;
}

}  // namespace

ClaimData claim_data(const Claim& c, const std::vector<ClaimCell>& cells, const std::vector<std::string>& config_keys) {
  ClaimData d;
  // The parameters among the cells' keys: what makes strata and the pooled warning.
  std::set<std::string> named;
  for (const auto& [k, v] : c.where.items()) named.insert(k);
  std::set<std::string> group_keys;
  if (c.compares_groups()) {
    for (const auto& [k, v] : c.a.items()) group_keys.insert(k);
    for (const auto& [k, v] : c.b.items()) group_keys.insert(k);
  }
  auto is_param = [&](const std::string& k) {
    if (!config_keys.empty()) return std::find(config_keys.begin(), config_keys.end(), k) != config_keys.end();
    return find_param(k) != nullptr || named.count(k) > 0 || group_keys.count(k) > 0;
  };
  std::vector<const ClaimCell*> mine;
  for (const ClaimCell& cell : cells) {
    if (!matches_group(c.where, cell)) continue;
    if (c.compares_groups() && !matches_group(c.a, cell) && !matches_group(c.b, cell)) continue;
    mine.push_back(&cell);
  }
  std::set<std::string> keys;
  for (const ClaimCell* cell : mine)
    for (const auto& [k, v] : cell->values)
      if (is_param(k)) keys.insert(k);
  // Unit of a cell: its pair_by values.
  std::map<std::string, size_t> unit_of;
  auto unit_name = [&](const ClaimCell& cell) {
    std::string u;
    for (const std::string& k : c.pair_by) u += (u.empty() ? "" : " ") + k + "=" + cell.get(k);
    return u;
  };
  auto unit_index = [&](const std::string& u) {
    auto [it, fresh] = unit_of.emplace(u, d.unit_names.size());
    if (fresh) {
      d.unit_names.push_back(u);
      d.strata.emplace_back();
      d.points.emplace_back();
    }
    return it->second;
  };
  // Which keys vary among the claim's cells (the pooled warning, strata, replicates).
  std::map<std::string, std::set<std::string>> seen;
  for (const ClaimCell* cell : mine)
    for (const std::string& k : keys) seen[k].insert(cell->get(k));
  std::set<std::string> claim_own(c.pair_by.begin(), c.pair_by.end());
  claim_own.insert(named.begin(), named.end());
  claim_own.insert(group_keys.begin(), group_keys.end());
  if (!c.x.empty() && c.kind != "difference_trend") claim_own.insert(c.x);  // difference_trend: matched on x
  if (!c.over.empty()) claim_own.insert(c.over);
  size_t missing_metric = 0, bad_number = 0;
  for (const ClaimCell* cell : mine) {
    if (cell->metric_known && !std::isfinite(cell->metric)) {
      ++missing_metric;
      continue;
    }
    const size_t u = unit_index(unit_name(*cell));
    ++d.cells;
    if (c.compares_groups()) {
      std::string stratum;
      // Strata: the other parameters that vary and apply to every cell of the claim (a key
      // only one group has, such as degree beside softmax, is part of that group).
      for (const std::string& k : keys)
        if (!claim_own.count(k) && seen[k].size() > 1 && !seen[k].count(""))
          stratum += (stratum.empty() ? "" : " ") + k + "=" + cell->get(k);
      if (c.kind == "difference_trend") d.stratum_x[stratum] = claim_number(cell->get(c.x));
      auto& slot = d.strata[u][stratum];
      (matches_group(c.a, *cell) ? slot.first : slot.second).push_back(cell->metric);
    } else {
      const double x = claim_number(cell->get(c.x));
      const double over = c.scans() ? claim_number(cell->get(c.over)) : 0.0;
      if (!std::isfinite(x) || (c.scans() && !(over > 0)) || (c.log_x && !(x > 0))) {
        ++bad_number;
        continue;
      }
      d.points[u].push_back({x, over, cell->metric});
    }
  }
  if (missing_metric > 0)
    d.notes.push_back(std::to_string(missing_metric) + " cell" + (missing_metric == 1 ? "" : "s") +
                      " without a finite " + c.metric + " left out");
  if (bad_number > 0)
    d.notes.push_back(std::to_string(bad_number) + " cell" + (bad_number == 1 ? "" : "s") + " without a " +
                      (c.log_x ? "positive " : "") + "number for " + c.x + (c.scans() ? " or " + c.over : "") +
                      " left out");
  // A key that takes one value within every unit (init_seed beside the seed it follows)
  // is part of the unit, not pooled.
  std::map<std::string, std::map<std::string, std::set<std::string>>> within;  // key -> unit -> values
  for (const ClaimCell* cell : mine)
    for (const std::string& k : keys) within[k][unit_name(*cell)].insert(cell->get(k));
  auto fixed_by_unit = [&](const std::string& k) {
    for (const auto& [u, values] : within[k])
      if (values.size() > 1) return false;
    return true;
  };
  for (const std::string& k : keys) {
    if (claim_own.count(k) || seen[k].size() < 2) continue;
    if (c.compares_groups()) continue;  // strata: matched within units, not pooled
    if (!c.pair_by.empty() && fixed_by_unit(k)) continue;
    d.pooled.push_back(k + " (" + std::to_string(seen[k].size()) + " values)");
  }
  // Sources of variation across the units: every seed key of the cells.
  for (const std::string& k : keys) {
    if (!replicate_key(k)) continue;
    std::set<std::string> values;
    for (const ClaimCell* cell : mine) values.insert(cell->get(k));
    (values.size() > 1 ? d.varying_replicates : d.constant_replicates).push_back(k);
  }
  return d;
}

std::string untestable_reason(const Claim& c, const ClaimData& d) {
  if (d.cells == 0) return "no cell matches the claim" + std::string(c.where.empty() ? "" : " (its where)");
  if (c.compares_groups()) {
    size_t with_a = 0, with_b = 0, both = 0;
    std::set<std::string> a_strata, b_strata;
    for (const auto& unit : d.strata) {
      bool ua = false, ub = false, ubo = false;
      for (const auto& [s, ab] : unit) {
        ua |= !ab.first.empty();
        ub |= !ab.second.empty();
        ubo |= !ab.first.empty() && !ab.second.empty();
        if (!ab.first.empty()) a_strata.insert(s);
        if (!ab.second.empty()) b_strata.insert(s);
      }
      with_a += ua;
      with_b += ub;
      both += ubo;
    }
    if (with_a == 0) return "group a matches no cell";
    if (with_b == 0) return "group b matches no cell";
    if (both == 0) {
      std::string why = "no unit holds cells of a and b that agree on the other parameters";
      if (!a_strata.empty() && !b_strata.empty())
        why += " (a's: " + *a_strata.begin() + "; b's: " + *b_strata.begin() + "): name them in a and b, or in where";
      return why;
    }
    if (both < 2) {
      std::string keys;
      for (const std::string& k : c.pair_by) keys += (keys.empty() ? "" : ", ") + k;
      return "1 unit holds both groups: a bootstrap over units needs 2 or more (vary " + keys + ")";
    }
    if (c.kind == "difference_trend") {
      std::set<double> xs;
      for (const auto& unit : d.strata)
        for (const auto& [s, ab] : unit)
          if (!ab.first.empty() && !ab.second.empty()) xs.insert(d.stratum_x.at(s));
      if (xs.size() < 2) return c.x + " takes one value where a and b meet: a trend needs 2 or more";
    }
    return "";
  }
  size_t units = 0;
  std::set<double> xs;
  for (const auto& unit : d.points) {
    units += !unit.empty();
    for (const auto& p : unit) xs.insert(p[0]);
  }
  std::string keys;
  for (const std::string& k : c.pair_by) keys += (keys.empty() ? "" : ", ") + k;
  if (units < 2) return units_text(units) + ": a bootstrap over units needs 2 or more (vary " + keys + ")";
  if (xs.size() < 2) return c.x + " takes one value among the claim's cells: a slope needs 2 or more";
  if (c.scans()) {
    std::map<double, std::set<double>> overs;
    for (const auto& unit : d.points)
      for (const auto& p : unit) overs[p[0]].insert(p[1]);
    for (const auto& [x, o] : overs)
      if (o.size() < 3)
        return c.over + " takes " + std::to_string(o.size()) + " value" + (o.size() == 1 ? "" : "s") + " at " + c.x +
               " " + format_number(x) + ": the best needs 3 or more";
  }
  return "";
}

}  // namespace attnsweep
