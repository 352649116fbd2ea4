#include "results/verdict_files.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "results/table.h"
#include "results/trajectory_metric.h"

namespace attnsweep {
using json = nlohmann::json;

SummaryTable read_summary_csv(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot read (run `attnsweep aggregate` on its directory first)");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  // RFC 4180: fields separated by commas, records by newlines, quotes around a field
  // that holds either, a quote inside written twice.
  std::vector<std::vector<std::string>> records(1);
  std::string field;
  bool quoted = false, any = false;
  size_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (ch == '"') {
        quoted = false;
      } else {
        line += ch == '\n';
        field += ch;
      }
    } else if (ch == '"') {
      quoted = true;
      any = true;
    } else if (ch == ',') {
      records.back().push_back(std::move(field));
      field.clear();
      any = true;
    } else if (ch == '\n' || ch == '\r') {
      if (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        records.back().push_back(std::move(field));
        records.emplace_back();
      }
      field.clear();
      any = false;
      ++line;
    } else {
      field += ch;
      any = true;
    }
  }
  if (quoted) throw std::runtime_error(path + ":" + std::to_string(line) + ": a quoted field is not closed");
  if (any || !field.empty()) records.back().push_back(std::move(field));
  if (records.back().empty()) records.pop_back();
  if (records.empty()) throw std::runtime_error(path + ": empty (expected a header line)");
  SummaryTable t;
  t.columns = records.front();
  for (size_t r = 1; r < records.size(); ++r) {
    if (records[r].size() != t.columns.size())
      throw std::runtime_error(path + ": record " + std::to_string(r + 1) + " has " +
                               std::to_string(records[r].size()) + " fields; the header has " +
                               std::to_string(t.columns.size()));
    ClaimCell cell;
    for (size_t c = 0; c < t.columns.size(); ++c) cell.values[t.columns[c]] = records[r][c];
    t.rows.push_back(std::move(cell));
  }
  // A parameter that does not apply is written "none" (results/table.h kNotApplicable); in
  // a column whose other values are all numbers it can only mean that: "" here, as a key
  // the cell lacks. (In a text column "none" stays: it is also scale's "unscaled".)
  for (const std::string& col : t.columns) {
    bool numeric = false, none = false;
    for (const ClaimCell& row : t.rows) {
      const std::string& v = row.get(col);
      if (v.empty()) continue;
      if (v == kNotApplicable) {
        none = true;
        continue;
      }
      if (std::isnan(claim_number(v))) {
        numeric = false;
        break;
      }
      numeric = true;
    }
    if (numeric && none)
      for (ClaimCell& row : t.rows)
        if (row.get(col) == kNotApplicable) row.values[col] = "";
  }
  return t;
}

DirVerdicts verdicts_of_dir(const std::string& dir, const std::string& claims_file, int resamples) {
  DirVerdicts out;
  auto read_json = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot read");
    try {
      return json::parse(in);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": not JSON (" + std::string(e.what()) + ")");
    }
  };
  json claims;
  std::string declared;
  const std::string manifest_path = dir + "/manifest.json";
  if (!claims_file.empty()) {
    const json g = read_json(claims_file);
    if (!g.is_object() || !g.contains("claims"))
      throw std::runtime_error(claims_file + ": claims: missing (expected a grid file with a `claims` list)");
    claims = g["claims"];
    out.claims_source = claims_file;
    declared = "after the run (from " + claims_file + ")";
  } else {
    if (!std::ifstream(manifest_path).good()) return out;
    const json m = read_json(manifest_path);
    if (!m.contains("grid") || !m["grid"].is_object() || !m["grid"].contains("claims")) return out;
    claims = m["grid"]["claims"];
    out.claims_source = manifest_path;
    const json d = m.value(kManifestClaimsDeclared, json::object());
    const int64_t done = d.value("cells_done", int64_t{-1});
    const std::string when = d.value("written", std::string());
    declared = done == 0  ? "before the run (" + when + ")"
               : done > 0 ? "after " + std::to_string(done) + " cells had finished (" + when + ")"
                          : "in the run's grid (time not recorded)";
  }
  std::vector<std::pair<std::string, std::string>> problems;
  out.claims = parse_claims(claims, problems);
  if (!problems.empty()) {
    std::string msg;
    for (const auto& [path, text] : problems)
      msg += (msg.empty() ? "" : "\n") + out.claims_source + ": " + path + ": " + text;
    throw std::runtime_error(msg);
  }
  SummaryTable table = read_summary_csv(dir + "/summary.csv");
  // Trajectory metrics (results/trajectory_metric.h): a column from each cell's file.
  for (const Claim& c : out.claims) {
    std::string problem;
    const auto tm = parse_trajectory_metric(c.metric, &problem);
    if (!tm || std::find(table.columns.begin(), table.columns.end(), c.metric) != table.columns.end()) continue;
    table.columns.push_back(c.metric);
    for (ClaimCell& row : table.rows) {
      double v = NAN;
      const std::string path = dir + "/runs/" + row.get("cell_id") + ".h5";
      if (!row.get("cell_id").empty() && std::filesystem::exists(path)) {
        try {
          v = trajectory_metric_value(h5::File::open_read(path), *tm);
        } catch (const std::exception&) {
          v = NAN;  // an unreadable file: the cell has no value (aggregate names such files)
        }
      }
      row.values[c.metric] = std::isfinite(v) ? format_number(v) : "";
    }
  }
  // The parameters: the keys of DIR's cell files where it has them, else the registry's.
  std::set<std::string> keys;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir + "/cells", ec)) {
    if (e.path().extension() != ".json") continue;
    try {
      const json cell = read_json(e.path().string());
      for (const auto& [k, v] : cell.items()) keys.insert(k);
    } catch (const std::exception&) {
      // an unreadable cell file: the registry's keys still name the parameters
    }
  }
  out.verdicts =
      decide_claims(out.claims, table, std::vector<std::string>(keys.begin(), keys.end()), resamples, declared);
  return out;
}

size_t write_dir_verdicts(const std::string& dir, const std::string& csv_path) {
  const DirVerdicts v = verdicts_of_dir(dir, "", kDefaultResamples);
  if (v.claims.empty()) return 0;
  write_verdicts_csv(csv_path, v.verdicts);
  return v.verdicts.size();
}

void write_verdicts_csv(const std::string& path, const std::vector<Verdict>& v) {
  auto f = [&](auto get) { return column_of<double>(v, get); };
  const std::vector<Column> cols = {
      string_column("claim", "the claim's id", column_of(v, &Verdict::id)),
      string_column("kind", "difference, equivalence, slope, trend, argmax_slope, argmin_slope",
                    column_of(v, &Verdict::kind)),
      string_column("statement", "the paper's statement", column_of(v, &Verdict::statement)),
      string_column("paper_setting", "the paper's setting, as declared", column_of(v, &Verdict::paper)),
      string_column("setting", "this run's setting: task, model, budget, x values, units",
                    column_of(v, &Verdict::setting)),
      string_column("metric", "the metric", column_of(v, &Verdict::metric)),
      string_column("target", "what the claim says, as a condition on the estimate", column_of(v, &Verdict::target)),
      int_column("units", "units (cells sharing the pairing keys) in the estimate", column_of(v, &Verdict::units)),
      int_column("cells", "cells in the estimate", column_of(v, &Verdict::cells)),
      float_column("estimate", "the estimate from every unit", f(&Verdict::estimate)),
      float_column("ci_lo", "95 % interval, low: the bootstrap's 2.5th percentile widened for small n",
                   f(&Verdict::lo)),
      float_column("ci_hi", "95 % interval, high: the bootstrap's 97.5th percentile widened for small n",
                   f(&Verdict::hi)),
      float_column("boot_lo", "2.5th percentile over bootstrap resamples of units (not widened)", f(&Verdict::boot_lo)),
      float_column("boot_hi", "97.5th percentile over bootstrap resamples of units (not widened)",
                   f(&Verdict::boot_hi)),
      float_column("p_a_greater", "share of units where a's metric exceeds b's (ties count half)",
                   f(&Verdict::p_a_greater)),
      string_column("verdict", "supported, contradicted, unresolved or not testable (the rule of results/verdict.h)",
                    column_of(v, &Verdict::word)),
      string_column("reason", "why not testable or unresolved", column_of(v, &Verdict::reason)),
      float_column("units_needed", "unresolved: units that would resolve it at the observed spread",
                   f(&Verdict::units_needed)),
      string_column("warnings", "one source of variation only, pooled keys, cells left out",
                    column_of(v, &Verdict::warnings)),
      string_column("declared", "when the claim was declared", column_of(v, &Verdict::declared)),
  };
  write_csv(path, cols, v.size());
}

std::string verdicts_text(const std::vector<Verdict>& v) {
  std::string s;
  for (const Verdict& x : v) {
    s += x.id + ": " + x.word;
    if (std::isfinite(x.estimate))
      s += "  " + signed_number(x.estimate) + " [" + signed_number(x.lo) + ", " + signed_number(x.hi) + "]";
    s += "  (" + x.target + "; " + std::to_string(x.units) + " units)";
    if (std::isfinite(x.p_a_greater)) s += "  P(a > b) " + format_number(std::round(x.p_a_greater * 100) / 100);
    s += "\n";
    if (!x.reason.empty()) s += "    " + x.reason + "\n";
    if (!x.warnings.empty()) s += "    warning: " + x.warnings + "\n";
  }
  return s;
}

std::string verdicts_markdown(const std::vector<Verdict>& v) {
  auto cell = [](std::string t) {
    std::string o;
    for (char ch : t) o += ch == '|' ? std::string("\\|") : ch == '\n' ? std::string(" ") : std::string(1, ch);
    return o;
  };
  std::string s =
      "| claim | paper's statement | paper's setting | this run | estimate [95 % interval] | verdict |\n"
      "|---|---|---|---|---|---|\n";
  for (const Verdict& x : v) {
    std::string est = std::isfinite(x.estimate)
                          ? signed_number(x.estimate) + " [" + signed_number(x.lo) + ", " + signed_number(x.hi) + "]"
                          : "—";
    est += " (" + x.metric + "; " + x.target + ")";
    std::string word = "**" + x.word + "**";
    if (!x.reason.empty()) word += ": " + x.reason;
    if (!x.warnings.empty()) word += " (" + x.warnings + ")";
    s += "| `" + x.id + "` | " + cell(x.statement) + " | " + cell(x.paper.empty() ? "—" : x.paper) + " | " +
         cell(x.setting) + " | " + cell(est) + " | " + cell(word) + " |\n";
  }
  return s;
}

}  // namespace attnsweep
