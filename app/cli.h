// The command line's shared pieces: option parsing with did-you-mean, --help, the
// checks of paths and ranges every subcommand makes, and the subcommands themselves
// (app/cmd_*.cpp), which app/main.cpp dispatches to.
#pragma once

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "coordinator/grid.h"

namespace attnsweep::cli {

namespace po = boost::program_options;
using json = nlohmann::json;

constexpr int kExitOk = 0, kExitUsage = 2;
// Worker slots per rank and threads per cell: beyond this it is a typo, not a machine.
constexpr int kMaxSlotsOrThreads = 4096;
constexpr int kMaxRetries = 100;  // as the grid's resources.retries (coordinator/grid.cpp)

// Parses a subcommand's options; on error prints one line naming the problem, returns false.
bool parse(const std::string& cmd, int argc, char** argv, const po::options_description& desc,
           const po::positional_options_description& pos, po::variables_map& vm);
// Prints the usage and options and returns true when --help was given.
bool help(const po::variables_map& vm, const char* synopsis, const po::options_description& desc);
void print_problems(const InputError& e);
// Runs `load` (load_grid, load_cell_config, ...); on an InputError prints its problems,
// one a line, and returns nothing (the caller exits kExitUsage).
template <class F>
auto load_or_report(F&& load) -> std::optional<decltype(load())> {
  try {
    return load();
  } catch (const InputError& e) {
    print_problems(e);
    return std::nullopt;
  }
}
// Prints "attnsweep CMD: OPTION: expected an integer in LO..HI, got V" when out of range.
bool in_range(const char* cmd, const char* option, long long v, long long lo, long long hi);
// Why DIR cannot be a results directory ("" when it can): it, or a folder above it, is a file.
std::string dir_problem(const std::string& dir);
// Why FILE cannot be written as a result file ("" when it can): it is a folder, or its
// folder does not exist.
std::string file_problem(const std::string& file);

// The subcommands: argv[0] is the command's name.
int cmd_plan(int argc, char** argv);            // app/cmd_grid.cpp
int cmd_activations(int argc, char** argv);     // app/cmd_grid.cpp
int cmd_schema(int argc, char** argv);          // app/cmd_grid.cpp
int cmd_results_schema(int argc, char** argv);  // app/cmd_grid.cpp
int cmd_run(int argc, char** argv);             // app/cmd_run.cpp
int cmd_submit(int argc, char** argv);          // app/cmd_run.cpp
int cmd_train(int argc, char** argv);           // app/cmd_run.cpp
int cmd_status(int argc, char** argv);          // app/cmd_run.cpp
int cmd_aggregate(int argc, char** argv);       // app/cmd_aggregate.cpp
int cmd_verdict(int argc, char** argv);         // app/cmd_verdict.cpp
int cmd_export(int argc, char** argv);          // app/cmd_export.cpp

}  // namespace attnsweep::cli

int cmd_attention(int argc, char** argv);  // app/cmd_attention.cpp
int cmd_report(int argc, char** argv);     // app/cmd_report.cpp
