// verdict: each claim of a run directory's grid decided by the rule of results/verdict.h.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

#include "app/cli.h"
#include "results/verdict_files.h"

namespace attnsweep::cli {

int cmd_verdict(int argc, char** argv) {
  std::string dir, claims_file, csv;
  int resamples = kDefaultResamples;
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "claims", po::value(&claims_file),
      "decide the `claims` of this grid file instead of the run's own (said to be declared after the run)")(
      "resamples", po::value(&resamples), "bootstrap resamples of the units (default 10000)")(
      "csv", po::value(&csv), "write the verdicts here instead of DIR/verdicts.csv")(
      "markdown", "print the verdicts as the results documents' markdown table");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  if (!parse("verdict", argc, argv, desc, pos, vm)) return kExitUsage;
  if (help(vm, "attnsweep verdict DIR [--claims GRID.json] [--resamples N] [--csv FILE] [--markdown]", desc))
    return kExitOk;
  if (!in_range("verdict", "--resamples", resamples, 100, 10000000)) return kExitUsage;
  if (!std::filesystem::is_directory(dir)) {
    std::fprintf(stderr, "attnsweep verdict: %s: no such directory\n", dir.c_str());
    return kExitUsage;
  }
  DirVerdicts r;
  try {
    r = verdicts_of_dir(dir, claims_file, resamples);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep verdict: %s\n", e.what());
    return kExitUsage;
  }
  if (r.claims.empty()) {
    std::fprintf(stderr,
                 "attnsweep verdict: %s/manifest.json: its grid declares no claims (declare them in the grid's "
                 "`claims` list before the run, docs/grid-format.md#claims, or pass --claims GRID.json)\n",
                 dir.c_str());
    return kExitUsage;
  }
  const std::string out = csv.empty() ? dir + "/verdicts.csv" : csv;
  try {
    write_verdicts_csv(out, r.verdicts);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep verdict: %s (--csv FILE writes elsewhere)\n", e.what());
    return 1;  // an output that could not be written
  }
  const std::string text = vm.count("markdown") ? verdicts_markdown(r.verdicts) : verdicts_text(r.verdicts);
  std::fputs(text.c_str(), stdout);
  if (!vm.count("markdown"))
    std::printf("%zu claim%s from %s; %s written\n", r.verdicts.size(), r.verdicts.size() == 1 ? "" : "s",
                r.claims_source.c_str(), out.c_str());
  return kExitOk;
}

}  // namespace attnsweep::cli
