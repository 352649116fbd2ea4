// aggregate: a run directory's cells into aggregate.h5, summary.csv and the fits.
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "results/aggregate.h"
#include "results/run_manifest.h"
#include "results/verdict_files.h"

namespace attnsweep::cli {

int cmd_aggregate(int argc, char** argv) {
  std::string dir;
  AggregateOptions opt;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "fit-min-n", po::value(&opt.fit_min_n), "fit only cells with prompt_length >= this")(
      "fit-max-n", po::value(&opt.fit_max_n), "fit only cells with prompt_length <= this")(
      "out-dir", po::value(&opt.out_dir),
      "write aggregate.h5 and the CSV files to this folder (made if missing) instead of DIR: for a read-only DIR");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse("aggregate", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep aggregate DIR [--fit-min-n N] [--fit-max-n N] [--out-dir OUT]", desc)) return kExitOk;
  if (vm.count("fit-min-n") && !in_range("aggregate", "--fit-min-n", opt.fit_min_n, 0, INT64_MAX)) return kExitUsage;
  if (vm.count("fit-max-n") && !in_range("aggregate", "--fit-max-n", opt.fit_max_n, 0, INT64_MAX)) return kExitUsage;
  if (opt.fit_min_n > opt.fit_max_n) {
    std::fprintf(stderr, "attnsweep aggregate: --fit-min-n %lld is more than --fit-max-n %lld: no cell to fit\n",
                 static_cast<long long>(opt.fit_min_n), static_cast<long long>(opt.fit_max_n));
    return kExitUsage;
  }
  // Where the outputs go must be writable: one line and exit 1 (an output that cannot be
  // written), before any HDF5 call could print its own error stack.
  {
    const std::string out = opt.out_dir.empty() ? dir : opt.out_dir;
    std::error_code ec;
    if (!opt.out_dir.empty()) std::filesystem::create_directories(out, ec);
    if (std::filesystem::is_directory(out, ec) && ::access(out.c_str(), W_OK) != 0) {
      std::fprintf(stderr, "attnsweep aggregate: %s: not writable (%s)%s\n", out.c_str(), std::strerror(errno),
                   opt.out_dir.empty() ? "; write the aggregate elsewhere with --out-dir OUT" : "");
      return 1;
    }
  }
  AggregateResult r;
  try {
    r = aggregate_dir(dir, opt);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const size_t nl = what.find('\n'); nl != std::string::npos) what = what.substr(0, nl);  // one line
    std::fprintf(stderr, "attnsweep aggregate: %s\n", what.c_str());
    return kExitUsage;
  }
  for (const std::string& s : r.skipped) std::fprintf(stderr, "attnsweep aggregate: skipped %s\n", s.c_str());
  if (r.not_in_grid > 0)
    std::fprintf(stderr, "attnsweep aggregate: %s\n", not_in_grid_note(r.not_in_grid, dir).c_str());
  if (!r.fits.empty()) {
    // Words shared by every group (task=norm_probe, dim=64 ...) are said once, above the table.
    auto words = [](const std::string& g) {
      std::vector<std::string> w;
      std::istringstream ss(g);
      for (std::string t; ss >> t;) w.push_back(t);
      return w;
    };
    std::vector<std::string> common = words(r.fits.front().group);
    for (const Fit& f : r.fits) {
      const std::vector<std::string> w = words(f.group);
      std::erase_if(common, [&](const std::string& c) { return std::find(w.begin(), w.end(), c) == w.end(); });
    }
    std::string common_text;
    for (const std::string& c : common) common_text += (common_text.empty() ? "" : " ") + c;
    std::printf("log-log fits of each metric against prompt_length%s%s%s:\n",
                common.empty() ? "" : " (all groups: ", common_text.c_str(), common.empty() ? "" : ")");
    std::printf("%-9s %-42s %8s %8s %7s %5s %11s\n", "metric", "group", "slope", "+-95%", "r2", "cells", "N range");
    for (const Fit& f : r.fits) {
      std::string g;
      for (const std::string& w : words(f.group))
        if (std::find(common.begin(), common.end(), w) == common.end()) g += (g.empty() ? "" : " ") + w;
      char range[48];
      std::snprintf(range, sizeof range, "%lld..%lld", static_cast<long long>(f.n_min),
                    static_cast<long long>(f.n_max));
      std::printf("%-9s %-42s %8.3f %8.3f %7.4f %5lld %11s\n", f.metric.c_str(), g.empty() ? "-" : g.c_str(), f.slope,
                  f.slope_ci95, f.r2, static_cast<long long>(f.points), range);
    }
  }
  // Paired comparisons (results/paired.h): the test metrics here, every metric in paired.csv.
  bool header = false;
  for (const PairedDiff& d : r.paired) {
    if (d.metric.rfind("test_", 0) != 0) continue;
    if (!header)
      std::printf(
          "paired differences a - b over cells equal but for the activation (mean, 95%% CI):\n%-13s %6s %-36s "
          "%-36s %5s %10s %9s %s\n",
          "metric", "N", "a", "b", "pairs", "mean", "+-95%", "a lower");
    header = true;
    std::printf("%-13s %6s %-36s %-36s %5lld %10.4g %9.3g %lld/%lld\n", d.metric.c_str(),
                std::isnan(d.prompt_length) ? "-" : std::to_string(std::llround(d.prompt_length)).c_str(), d.a.c_str(),
                d.b.c_str(), static_cast<long long>(d.pairs), d.mean_diff, d.ci95, static_cast<long long>(d.a_lower),
                static_cast<long long>(d.pairs));
  }
  for (const BestScaleFit& f : r.best_scale.fits)
    std::printf(
        "best scale c*(N) by %s, log c* against log N: slope %.3f, 95%% bootstrap [%.3f, %.3f] over %lld N "
        "(paper A's 1/sqrt(N): -0.5)%s%s\n",
        f.metric.c_str(), f.slope, f.slope_lo, f.slope_hi, static_cast<long long>(f.points),
        r.best_scale.fits.size() > 2 ? ": " : "", r.best_scale.fits.size() > 2 ? f.group.c_str() : "");
  std::printf("aggregated %lld cells (%lld read, %lld unchanged)%s -> %s/aggregate.h5, %s/summary.csv%s\n",
              static_cast<long long>(r.cells), static_cast<long long>(r.reread), static_cast<long long>(r.reused),
              r.skipped.empty() ? "" : (" (" + std::to_string(r.skipped.size()) + " files skipped)").c_str(),
              dir.c_str(), dir.c_str(), r.paired.empty() ? "" : (", " + dir + "/paired.csv").c_str());
  // The grid's claims decided beside summary.csv (results/verdict.h): DIR/verdicts.csv.
  if (opt.out_dir.empty()) {
    try {
      if (const size_t n = write_dir_verdicts(dir, dir + "/verdicts.csv"); n > 0)
        std::printf("%zu claim%s decided -> %s/verdicts.csv (attnsweep verdict %s prints them)\n", n, n == 1 ? "" : "s",
                    dir.c_str(), dir.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "attnsweep aggregate: verdict: %s\n", e.what());
    }
  }
  return kExitOk;
}

}  // namespace attnsweep::cli
