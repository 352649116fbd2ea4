// `attnsweep report DIR`: DIR/report.html, one self-contained page with the figures of
// science.md ("What a user should be able to reproduce") as embedded PNGs. The figures
// are made by results/plot.py (compiled in), run with /usr/bin/python3; `aggregate`
// runs first when DIR/aggregate.h5 is missing or older than anything under runs/.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "experiments/params.h"
#include "experiments/result_schema.h"
#include "results/aggregate.h"
#include "results/report_script.h"
#include "results/verdict_files.h"

extern char** environ;

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace attnsweep;

namespace {

constexpr int kExitOk = 0, kExitUsage = 2, kExitFailed = 1;
const char* kDebianPackages = "python3-matplotlib python3-h5py python3-numpy";

// True when aggregate.h5 is missing or older than runs/ or any file in it.
bool aggregate_stale(const fs::path& dir) {
  std::error_code ec;
  const fs::path agg = dir / "aggregate.h5";
  if (!fs::exists(agg, ec)) return true;
  const auto t = fs::last_write_time(agg, ec);
  if (ec) return true;
  const fs::path runs = dir / "runs";
  if (fs::last_write_time(runs, ec) > t) return true;
  // A grid changed with run --force: aggregate again, with only its cells (results/run_manifest.h).
  if (std::error_code ec2; fs::last_write_time(dir / "manifest.json", ec2) > t && !ec2) return true;
  for (const auto& e : fs::directory_iterator(runs, ec)) {
    std::error_code ec2;
    if (e.last_write_time(ec2) > t) return true;
  }
  return false;
}

// Runs argv, inheriting stdout/stderr; returns its exit status, -1 if it cannot start.
int run_process(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int st = 0;
  while (waitpid(pid, &st, 0) < 0)
    if (errno != EINTR) return -1;
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

}  // namespace

int cmd_report(int argc, char** argv) {
  std::string dir, python = "/usr/bin/python3";
  po::options_description desc("options");
  desc.add_options()("help,h", "this help")("dir", po::value(&dir)->required(), "results directory")(
      "python", po::value(&python)->default_value(python),
      "Python 3 with numpy, h5py and matplotlib (Debian: python3-numpy python3-h5py python3-matplotlib)")(
      "no-aggregate", "use DIR/aggregate.h5 as it is, even when older than runs/");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(argc, argv).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: attnsweep report DIR [--python PATH] [--no-aggregate]\n\n"
                   "Writes DIR/report.html: one self-contained page (figures embedded as PNG) with the norm\n"
                   "laws against prompt length, norms over training per layer, accuracy, in-context\n"
                   "regression and loss curves (each when its data exists), a table of final metrics\n"
                   "(mean +- sd over seeds) and the sweep's counts. Runs `aggregate` first when\n"
                   "DIR/aggregate.h5 is missing or older than DIR/runs/.\n\n"
                << desc << "\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "attnsweep report: %s (see attnsweep report --help)\n", e.what());
    return kExitUsage;
  }

  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root / "runs", ec)) {
    std::fprintf(stderr, "attnsweep report: %s: no runs/ folder (is this a results directory?)\n", dir.c_str());
    return kExitUsage;
  }
  if (::access(python.c_str(), X_OK) != 0) {
    std::fprintf(stderr,
                 "attnsweep report: %s not found: the report needs Python 3 with matplotlib and h5py "
                 "(Debian: apt-get install python3 %s)\n",
                 python.c_str(), kDebianPackages);
    return kExitUsage;
  }

  if (!vm.count("no-aggregate") && aggregate_stale(root)) {
    std::printf("aggregate.h5 is missing or older than runs/: aggregating first\n");
    try {
      AggregateResult r = aggregate_dir(dir, {});
      for (const std::string& s : r.skipped) std::fprintf(stderr, "attnsweep aggregate: skipped %s\n", s.c_str());
      std::printf("aggregated %lld cells -> %s/aggregate.h5\n", static_cast<long long>(r.cells), dir.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "attnsweep report: aggregate: %s\n", e.what());
      return kExitUsage;
    }
  }
  // The grid's claims decided first (results/verdict.h): DIR/verdicts.csv, the page's first section.
  {
    const fs::path verdicts = root / "verdicts.csv";
    try {
      if (const size_t n = write_dir_verdicts(dir, verdicts.string()); n > 0)
        std::printf("%zu claims decided -> %s\n", n, verdicts.c_str());
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::remove(verdicts, ec);  // no stale verdicts on the page
      std::fprintf(stderr, "attnsweep report: verdict: %s (the page shows no verdicts)\n", e.what());
    }
  }
  std::fflush(stdout);

  // The script goes to a private temporary file, removed whatever happens.
  std::string script = (fs::temp_directory_path() / "attnsweep-plot-XXXXXX.py").string();
  const int fd = ::mkstemps(script.data(), 3);
  if (fd < 0) {
    std::fprintf(stderr, "attnsweep report: cannot create a temporary file: %s\n", std::strerror(errno));
    return kExitFailed;
  }
  struct Remove {
    std::string p;
    ~Remove() { ::unlink(p.c_str()); }
  } remove{script};
  const std::string_view text = plot_script();
  for (size_t off = 0; off < text.size();) {
    const ssize_t n = ::write(fd, text.data() + off, text.size() - off);
    if (n <= 0) {
      ::close(fd);
      std::fprintf(stderr, "attnsweep report: %s: write failed\n", script.c_str());
      return kExitFailed;
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);

  // The registries the page's labels and names come from: activations and the result schema.
  const int rc = run_process(
      {python, script, dir, ATTNSWEEP_VERSION, activation_registry_json().dump(), result_schema_json().dump()});
  if (rc == 0) return kExitOk;
  if (rc == 3) {
    std::fprintf(stderr, "attnsweep report: %s lacks matplotlib, h5py or numpy (Debian: apt-get install %s)\n",
                 python.c_str(), kDebianPackages);
    return kExitUsage;
  }
  if (rc == 2) return kExitUsage;  // the script said what was wrong with the input
  std::fprintf(stderr, "attnsweep report: %s %s failed (exit %d)\n", python.c_str(), "plot.py", rc);
  return kExitFailed;
}
