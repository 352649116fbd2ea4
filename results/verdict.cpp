#include "results/verdict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include "results/stats.h"
#include "results/table.h"

namespace attnsweep {
using json = nlohmann::json;

namespace {}  // namespace

std::string signed_number(double v) {
  if (!std::isfinite(v)) return "—";
  char b[48];
  const double a = std::abs(v);
  if (a != 0 && (a < 1e-3 || a >= 1e5))
    std::snprintf(b, sizeof b, "%.2e", v);
  else if (a >= 100)
    std::snprintf(b, sizeof b, "%.1f", v);
  else if (a >= 1)
    std::snprintf(b, sizeof b, "%.3f", v);
  else
    std::snprintf(b, sizeof b, "%.4f", v);
  std::string s = b;
  return v >= 0 && s[0] != '+' ? "+" + s : s;
}

namespace {

// The statistic of one resample: `weights[u]` = how often unit u was drawn.
using Statistic = std::function<double(const std::vector<int>&)>;

struct Interval {
  double estimate = NAN, lo = NAN, hi = NAN;  // lo, hi: widened for small n (results/stats.h)
  double boot_lo = NAN, boot_hi = NAN;        // the plain percentile interval
};

Interval bootstrap(size_t units, const Statistic& stat, int resamples, const std::string& id) {
  Interval r;
  std::vector<int> w(units, 1);
  r.estimate = stat(w);
  std::mt19937_64 rng(0x7e7d1c7ULL ^ std::hash<std::string>{}(id));
  std::uniform_int_distribution<size_t> pick(0, units - 1);
  std::vector<double> draws(static_cast<size_t>(resamples));
  for (auto& d : draws) {
    std::fill(w.begin(), w.end(), 0);
    for (size_t k = 0; k < units; ++k) ++w[pick(rng)];
    d = stat(w);
  }
  r.boot_lo = percentile(draws, 0.025);
  r.boot_hi = percentile(draws, 0.975);
  const double f = small_sample_widening(units);
  r.lo = r.estimate - f * (r.estimate - r.boot_lo);
  r.hi = r.estimate + f * (r.boot_hi - r.estimate);
  return r;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / static_cast<double>(v.size());
}

// The one rule: the word from the interval and what the claim says.
struct Decision {
  std::string word;
  double distance = NAN;  // from the estimate to the boundary that would resolve it
};

Decision decide(const Claim& c, const Interval& iv) {
  const double e = iv.estimate, lo = iv.lo, hi = iv.hi;
  if (!std::isfinite(e) || !std::isfinite(lo) || !std::isfinite(hi)) return {"not testable", NAN};
  if (c.kind == "difference") {
    const bool greater = c.direction == "a > b";
    const double t = greater ? c.threshold : -c.threshold;
    if (greater ? lo > t : hi < t) return {"supported", NAN};
    if (greater ? hi < t : lo > t) return {"contradicted", NAN};
    return {"unresolved", std::abs(e - t)};
  }
  if (c.kind == "equivalence") {
    const double m = c.margin;
    if (lo > -m && hi < m) return {"supported", NAN};
    if (hi < -m || lo > m) return {"contradicted", NAN};
    return {"unresolved", std::abs(std::abs(e) - m)};
  }
  if (c.kind == "trend" || c.kind == "difference_trend") {
    const bool up = c.direction == "increasing";
    if (up ? lo > 0 : hi < 0) return {"supported", NAN};
    if (up ? hi < 0 : lo > 0) return {"contradicted", NAN};
    return {"unresolved", std::abs(e)};
  }
  // slope, argmax_slope, argmin_slope
  const double a = c.expect - c.tolerance, b = c.expect + c.tolerance;
  if (lo >= a && hi <= b) return {"supported", NAN};
  if (hi < a || lo > b) return {"contradicted", NAN};
  return {"unresolved", std::abs(std::abs(e - c.expect) - c.tolerance)};
}

std::string target_text(const Claim& c) {
  if (c.kind == "difference")
    return c.direction == "a > b" ? "a − b > " + format_number(c.threshold)
                                  : "a − b < " + (c.threshold == 0 ? std::string("0") : format_number(-c.threshold));
  if (c.kind == "equivalence") return "|a − b| < " + format_number(c.margin);
  if (c.kind == "trend") return std::string("slope ") + (c.direction == "increasing" ? "> 0" : "< 0");
  if (c.kind == "difference_trend")
    return std::string("slope of a − b on ") + (c.log_x ? "log " : "") + c.x +
           (c.direction == "increasing" ? " > 0" : " < 0");
  return "slope " + format_number(c.expect) + " ± " + format_number(c.tolerance);
}

bool in_group(const json& g, const ClaimCell& cell) {
  for (const auto& [k, v] : g.items())
    if (!claim_value_matches(v, cell.get(k))) return false;
  return true;
}

// This run's setting in words: the task, the model and budget where one value holds, the x
// values, the units.
std::string setting_text(const Claim& c, const std::vector<ClaimCell>& cells, size_t units) {
  std::vector<const ClaimCell*> mine;
  for (const ClaimCell& cell : cells)
    if (in_group(c.where, cell) && (!c.compares_groups() || in_group(c.a, cell) || in_group(c.b, cell)))
      mine.push_back(&cell);
  std::string s;
  auto values = [&](const std::string& k) {
    std::set<double> nums;
    std::set<std::string> texts;
    for (const ClaimCell* cell : mine)
      if (!cell->get(k).empty()) {
        const double v = claim_number(cell->get(k));
        if (std::isfinite(v))
          nums.insert(v);
        else
          texts.insert(cell->get(k));
      }
    std::string out;
    for (double v : nums) out += (out.empty() ? "" : ", ") + format_number(v);
    for (const auto& t : texts) out += (out.empty() ? "" : ", ") + t;
    return std::make_pair(nums.size() + texts.size(), out);
  };
  for (const char* k : {"task", "dim", "layers", "heads", "steps", "batch", "lr_schedule"}) {
    auto [n, text] = values(k);
    if (n == 1) s += (s.empty() ? "" : " ") + std::string(k) + "=" + text;
  }
  const std::string xkey = c.x.empty() ? "prompt_length" : c.x;
  if (auto [n, text] = values(xkey); n > 0) s += (s.empty() ? "" : "; ") + xkey + " " + text;
  if (c.scans())
    if (auto [n, text] = values(c.over); n > 0) s += "; " + c.over + " " + text;
  std::string keys;
  for (const std::string& k : c.pair_by) keys += (keys.empty() ? "" : ", ") + k;
  s += (s.empty() ? "" : "; ") + std::to_string(units) + " units (" + keys + ")";
  return s;
}

Verdict decide_one(const Claim& c, const SummaryTable& table, const std::vector<std::string>& config_keys,
                   int resamples) {
  Verdict v;
  v.id = c.id;
  v.kind = c.kind;
  v.statement = c.statement;
  v.metric = c.metric;
  v.paper = c.paper;
  v.target = target_text(c);
  std::vector<std::string> warnings;
  if (std::find(table.columns.begin(), table.columns.end(), c.metric) == table.columns.end()) {
    v.word = "not testable";
    v.reason = "no column " + c.metric + " in summary.csv";
    return v;
  }
  std::vector<ClaimCell> rows;
  size_t left_out = 0;
  for (const ClaimCell& r : table.rows) {
    if (r.values.count("status") && r.get("status") != "complete") {
      ++left_out;
      continue;
    }
    ClaimCell cell = r;
    cell.metric = claim_number(r.get(c.metric));
    cell.metric_known = true;
    rows.push_back(std::move(cell));
  }
  const ClaimData d = claim_data(c, rows, config_keys);
  v.cells = static_cast<int64_t>(d.cells);
  for (const std::string& n : d.notes) warnings.push_back(n);
  if (left_out > 0)
    warnings.push_back(std::to_string(left_out) +
                       " cells not complete (diverged, failed, pending) left out of the run");
  if (!d.pooled.empty()) {
    std::string p;
    for (const std::string& k : d.pooled) p += (p.empty() ? "" : ", ") + k;
    warnings.push_back("pooled over " + p);
  }
  if (!d.varying_replicates.empty() && !d.constant_replicates.empty()) {
    std::string var, con;
    for (const std::string& k : d.varying_replicates) var += (var.empty() ? "" : ", ") + k;
    for (const std::string& k : d.constant_replicates) con += (con.empty() ? "" : ", ") + k;
    warnings.push_back("spread from " + var + " only: " + con + " is the same in every unit (vary " + con +
                       " too, or the interval leaves its variation out)");
  } else if (d.varying_replicates.empty()) {
    warnings.push_back("the units differ in no seed: their spread is not that of a replicate");
  }
  auto finish = [&] {
    for (const std::string& w : warnings) v.warnings += (v.warnings.empty() ? "" : "; ") + w;
  };
  if (std::string why = untestable_reason(c, d); !why.empty()) {
    v.word = "not testable";
    v.reason = why;
    finish();
    return v;
  }
  Interval iv;
  // slope, trend: the cells' (x, metric) per unit; difference_trend: the matched
  // differences a − b at each x per unit
  std::vector<std::vector<std::array<double, 3>>> points = d.points;
  if (c.kind == "difference_trend") {
    points.clear();
    for (const auto& unit : d.strata) {
      std::vector<std::array<double, 3>> p;
      for (const auto& [s, ab] : unit)
        if (!ab.first.empty() && !ab.second.empty())
          p.push_back({d.stratum_x.at(s), 0.0, mean(ab.first) - mean(ab.second)});
      if (!p.empty()) points.push_back(std::move(p));
    }
  }
  if (c.compares_groups() && c.kind != "difference_trend") {
    std::vector<double> diffs;
    size_t unmatched = 0;
    for (const auto& unit : d.strata) {
      std::vector<double> per;
      for (const auto& [s, ab] : unit) {
        if (ab.first.empty() || ab.second.empty()) {
          ++unmatched;
          continue;
        }
        per.push_back(mean(ab.first) - mean(ab.second));
      }
      if (!per.empty()) diffs.push_back(mean(per));
    }
    if (unmatched > 0) warnings.push_back(std::to_string(unmatched) + " strata with only one of the groups left out");
    v.units = static_cast<int64_t>(diffs.size());
    double greater = 0;
    for (double x : diffs) greater += x > 0 ? 1.0 : (x == 0 ? 0.5 : 0.0);
    v.p_a_greater = greater / static_cast<double>(diffs.size());
    iv = bootstrap(
        diffs.size(),
        [&](const std::vector<int>& w) {
          double s = 0, n = 0;
          for (size_t u = 0; u < w.size(); ++u) {
            s += w[u] * diffs[u];
            n += w[u];
          }
          return s / n;
        },
        resamples, c.id);
  } else if (!c.scans()) {
    // Per unit the sums of least squares: n, Σx, Σy, Σxx, Σxy.
    std::vector<std::array<double, 5>> sums;
    size_t nonpositive = 0, single_x = 0;
    for (const auto& unit : points) {
      std::array<double, 5> s{};
      for (const auto& p : unit) {
        const double x = c.log_x ? std::log(p[0]) : p[0];
        if (c.log_y && !(p[2] > 0)) {
          ++nonpositive;
          continue;
        }
        const double y = c.log_y ? std::log(p[2]) : p[2];
        s[0] += 1;
        s[1] += x;
        s[2] += y;
        s[3] += x * x;
        s[4] += x * y;
      }
      if (s[0] == 0) continue;
      if (s[3] - s[1] * s[1] / s[0] <= 1e-12 * std::abs(s[3])) {
        ++single_x;  // one value of x: nothing to a slope within units
        continue;
      }
      sums.push_back(s);
    }
    if (single_x > 0)
      warnings.push_back(std::to_string(single_x) + " unit" + (single_x == 1 ? "" : "s") + " with one value of " + c.x +
                         " left out (a slope within units needs two)");
    if (nonpositive > 0)
      warnings.push_back(std::to_string(nonpositive) + " cells with a metric <= 0 left out of the log");
    v.units = static_cast<int64_t>(sums.size());
    iv = bootstrap(
        sums.size(),
        [&](const std::vector<int>& w) {
          // The slope within units: each unit's own means removed (a paired slope, blind
          // to a unit's level), its centred sums weighted by how often it was drawn.
          double cxx = 0, cxy = 0, scale = 0;
          for (size_t u = 0; u < w.size(); ++u) {
            if (w[u] == 0) continue;
            const auto& s = sums[u];
            cxx += w[u] * (s[3] - s[1] * s[1] / s[0]);
            cxy += w[u] * (s[4] - s[1] * s[2] / s[0]);
            scale += w[u] * s[3];
          }
          return cxx > 1e-12 * scale ? cxy / cxx : NAN;
        },
        resamples, c.id);
  } else {
    // argmax / argmin: per unit, per x, per value of `over`, the mean metric (larger better).
    const double sign = c.kind == "argmax_slope" ? 1.0 : -1.0;
    std::set<double> xs_set;
    std::map<double, std::set<double>> overs;
    for (const auto& unit : d.points)
      for (const auto& p : unit) {
        xs_set.insert(p[0]);
        overs[p[0]].insert(p[1]);
      }
    const std::vector<double> xs(xs_set.begin(), xs_set.end());
    // y[u][i][j]: unit u, x index i, over index j (NaN: missing)
    std::vector<std::vector<std::vector<double>>> y;
    std::vector<std::vector<double>> log_over(xs.size());
    for (size_t i = 0; i < xs.size(); ++i)
      for (double o : overs[xs[i]]) log_over[i].push_back(std::log(o));
    for (const auto& unit : d.points) {
      std::vector<std::vector<std::vector<double>>> acc(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) acc[i].resize(log_over[i].size());
      for (const auto& p : unit) {
        const size_t i = static_cast<size_t>(std::lower_bound(xs.begin(), xs.end(), p[0]) - xs.begin());
        const auto& lo = log_over[i];
        const size_t j = static_cast<size_t>(std::lower_bound(lo.begin(), lo.end(), std::log(p[1])) - lo.begin());
        acc[i][j].push_back(sign * p[2]);
      }
      std::vector<std::vector<double>> m(xs.size());
      for (size_t i = 0; i < xs.size(); ++i)
        for (const auto& a : acc[i]) m[i].push_back(mean(a));
      y.push_back(std::move(m));
    }
    v.units = static_cast<int64_t>(y.size());
    std::vector<double> log_x(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) log_x[i] = std::log(xs[i]);
    auto best_logs = [&](const std::vector<int>& w, std::vector<bool>* edge) {
      std::vector<double> best(xs.size());
      for (size_t i = 0; i < xs.size(); ++i) {
        std::vector<double> means(log_over[i].size());
        for (size_t j = 0; j < means.size(); ++j) {
          double s = 0, n = 0;
          for (size_t u = 0; u < y.size(); ++u)
            if (w[u] > 0 && std::isfinite(y[u][i][j])) {
              s += w[u] * y[u][i][j];
              n += w[u];
            }
          if (n == 0) return std::vector<double>{};
          means[j] = s / n;
        }
        bool at_edge = false;
        best[i] = best_log_c(log_over[i], means, &at_edge);
        if (edge != nullptr) (*edge)[i] = at_edge;
      }
      return best;
    };
    std::vector<bool> edge(xs.size());
    const std::vector<double> full = best_logs(std::vector<int>(y.size(), 1), &edge);
    iv = bootstrap(
        y.size(),
        [&](const std::vector<int>& w) {
          const std::vector<double> b = best_logs(w, nullptr);
          return b.empty() ? NAN : ols_slope(log_x, b);
        },
        resamples, c.id);
    std::string best_text;
    for (size_t i = 0; i < xs.size() && !full.empty(); ++i)
      best_text +=
          (best_text.empty() ? "" : ", ") + format_number(xs[i]) + ": " + signed_number(std::exp(full[i])).substr(1);
    v.reason = "best " + c.over + " at " + c.x + " " + best_text;
    for (size_t i = 0; i < xs.size() && !full.empty(); ++i) {
      if (!edge[i]) continue;
      const bool lower = std::abs(full[i] - log_over[i].front()) < 1e-12;
      const double at = lower ? *overs[xs[i]].begin() : *overs[xs[i]].rbegin();  // the grid's value, exactly
      v.word = "not testable";
      v.reason = "censored: the best " + c.over + " at " + c.x + " " + format_number(xs[i]) + " is the grid's " +
                 (lower ? "lowest" : "highest") + " (" + format_number(at) + "): extend " + c.over +
                 (lower ? " below " : " above ") + format_number(at) + "; " + v.reason;
      break;
    }
  }
  v.estimate = iv.estimate;
  v.lo = iv.lo;
  v.hi = iv.hi;
  v.boot_lo = iv.boot_lo;
  v.boot_hi = iv.boot_hi;
  v.setting = setting_text(c, rows, static_cast<size_t>(v.units));
  if (v.word.empty()) {
    const Decision dec = decide(c, iv);
    v.word = dec.word;
    if (dec.word == "unresolved") {
      const double half = (iv.hi - iv.lo) / 2;
      if (dec.distance > 0 && half > 0)
        v.units_needed = std::ceil(static_cast<double>(v.units) * (half / dec.distance) * (half / dec.distance));
      v.reason = std::isfinite(v.units_needed)
                     ? "the interval spans " + v.target + "; about " + format_number(v.units_needed) +
                           " units would resolve it if the estimate and spread hold"
                     : "the interval spans " + v.target + " and the estimate sits on its boundary";
    } else if (dec.word == "not testable") {
      v.reason = "the resamples give no finite estimate";
    }
  }
  finish();
  return v;
}

}  // namespace

std::vector<Verdict> decide_claims(const std::vector<Claim>& claims, const SummaryTable& table,
                                   const std::vector<std::string>& config_keys, int resamples,
                                   const std::string& declared) {
  std::vector<Verdict> out;
  for (const Claim& c : claims) {
    Verdict v = decide_one(c, table, config_keys, resamples);
    v.declared = declared;
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace attnsweep
