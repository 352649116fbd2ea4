#include "app/cli.h"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "experiments/params.h"

namespace attnsweep::cli {

// Parses a subcommand's options; on error prints one line naming the problem, returns false.
bool parse(const std::string& cmd, int argc, char** argv, const po::options_description& desc,
           const po::positional_options_description& pos, po::variables_map& vm) {
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) return true;
    po::notify(vm);
    return true;
  } catch (const po::unknown_option& e) {
    std::string name = e.get_option_name();
    std::vector<std::string> known;
    for (const auto& o : desc.options()) known.push_back("--" + o->long_name());
    const std::string s = closest_match(name, known);
    if (name == "-m" || name == "--multirun")
      std::fprintf(stderr,
                   "attnsweep %s: %s: unknown option; no flag is needed to sweep: every axis of the grid and every "
                   "key=a,b override is swept (Hydra's -m is what attnsweep always does)\n",
                   cmd.c_str(), name.c_str());
    else
      std::fprintf(stderr, "attnsweep %s: %s: unknown option%s\n", cmd.c_str(), name.c_str(),
                   s.empty() ? "" : (" (did you mean " + s + "?)").c_str());
  } catch (const po::too_many_positional_options_error&) {
    std::fprintf(stderr, "attnsweep %s: too many arguments (see attnsweep %s --help)\n", cmd.c_str(), cmd.c_str());
  } catch (const po::error& e) {
    std::fprintf(stderr, "attnsweep %s: %s\n", cmd.c_str(), e.what());
  }
  return false;
}

bool help(const po::variables_map& vm, const char* synopsis, const po::options_description& desc) {
  if (!vm.count("help")) return false;
  std::cout << "usage: " << synopsis << "\n\n" << desc << "\n";
  return true;
}

void print_problems(const InputError& e) {
  for (const std::string& p : e.problems) std::fprintf(stderr, "%s\n", p.c_str());
}

bool in_range(const char* cmd, const char* option, long long v, long long lo, long long hi) {
  if (v >= lo && v <= hi) return true;
  std::fprintf(stderr, "attnsweep %s: %s: expected an integer in %lld..%lld, got %lld\n", cmd, option, lo, hi, v);
  return false;
}

// Why DIR cannot be a results directory ("" when it can): it, or a folder above it, is a file.
std::string dir_problem(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) return "exists and is not a directory";
  for (fs::path p = fs::path(dir).parent_path(); !p.empty(); p = p.parent_path()) {
    if (fs::exists(p, ec)) {
      if (!fs::is_directory(p, ec)) return p.string() + " is not a directory";
      break;
    }
    if (p == p.parent_path()) break;
  }
  return "";
}

// Why FILE cannot be written as a result file ("" when it can): it is a folder, or its
// folder does not exist.
std::string file_problem(const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(file);
  if (fs::is_directory(p, ec)) return "is a directory, expected a file name";
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  if (!fs::is_directory(dir, ec)) return "no directory " + dir.string() + " to write it in";
  return "";
}

}  // namespace attnsweep::cli
