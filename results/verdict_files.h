// The files of verdicts: DIR/summary.csv read, a run directory's claims (its manifest's,
// or a grid file's) decided, DIR/verdicts.csv written, and the tables printed
// (results/verdict.h holds the rule).
#pragma once

#include <string>
#include <vector>

#include "results/verdict.h"

namespace attnsweep {

// DIR/summary.csv: RFC 4180 CSV with a header line. Throws std::runtime_error naming the file and line.
SummaryTable read_summary_csv(const std::string& path);

// The claims of a run directory decided: those of DIR/manifest.json's grid (declared
// before the run when the manifest's claims_declared says no cell had finished), or, with
// `claims_file`, the `claims` list of that grid file (declared after the run, and said
// so), from DIR/summary.csv. Throws std::runtime_error naming the file and the problem
// (one a line); `claims` empty when DIR's grid declares none.
struct DirVerdicts {
  std::vector<Claim> claims;
  std::vector<Verdict> verdicts;
  std::string claims_source;  // the manifest or the file the claims came from
};
DirVerdicts verdicts_of_dir(const std::string& dir, const std::string& claims_file, int resamples);

// The manifest's record of when its grid's claims were declared: {"written": time,
// "cells_done": result files of the grid already in runs/ then}, kept while the claims
// stay the same (`run` writes it: coordinator/resume.cpp).
inline constexpr const char* kManifestClaimsDeclared = "claims_declared";

// DIR's own claims (its manifest's) decided and written to `csv_path`: how many (0: the
// grid declares none, nothing written). What aggregate and report do after their work.
// Throws as verdicts_of_dir and write_verdicts_csv.
size_t write_dir_verdicts(const std::string& dir, const std::string& csv_path);

// DIR/verdicts.csv (atomically), a table for the terminal, and the markdown table of the
// results documents (claim, the paper's statement and setting, this run's, estimate
// [interval], verdict).
void write_verdicts_csv(const std::string& path, const std::vector<Verdict>& v);
std::string verdicts_text(const std::vector<Verdict>& v);
std::string verdicts_markdown(const std::vector<Verdict>& v);

}  // namespace attnsweep
