#include "slurm/submit.h"
#include "base/options.h"

#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "base/process.h"
#include "base/sha256.h"
#include "base/utc_time.h"
#include "coordinator/grid.h"
#include "coordinator/rundir.h"
#include "slurm_template.h"

namespace attnsweep {

namespace fs = std::filesystem;

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
}

// Single-quotes a word for bash.
std::string shell_quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:+,@%") ==
                        std::string::npos)
    return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
bool valid_slurm_time(std::string t) {
  if (const size_t dash = t.find('-'); dash != std::string::npos) {
    if (!all_digits(t.substr(0, dash))) return false;
    t = t.substr(dash + 1);
  }
  int parts = 0;
  for (size_t start = 0;; ++parts) {
    const size_t colon = t.find(':', start);
    if (!all_digits(t.substr(start, colon == std::string::npos ? std::string::npos : colon - start))) return false;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return parts <= 2;
}

// Seconds of a valid Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
long long slurm_time_seconds(std::string t) {
  long long days = -1;
  if (const size_t dash = t.find('-'); dash != std::string::npos) {
    days = std::stoll(t.substr(0, dash));
    t = t.substr(dash + 1);
  }
  std::vector<long long> v;
  for (size_t start = 0;;) {
    const size_t colon = t.find(':', start);
    v.push_back(std::stoll(t.substr(start, colon == std::string::npos ? std::string::npos : colon - start)));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (days >= 0) {  // D-HH, D-HH:MM, D-HH:MM:SS
    while (v.size() < 3) v.push_back(0);
    return ((days * 24 + v[0]) * 60 + v[1]) * 60 + v[2];
  }
  if (v.size() == 1) return v[0] * 60;         // MM
  if (v.size() == 2) return v[0] * 60 + v[1];  // MM:SS
  return (v[0] * 60 + v[1]) * 60 + v[2];       // HH:MM:SS
}

// sbatch options that take no value (the rest need one: --qos=high, not --qos).
bool sbatch_flag_only(const std::string& name) {
  static const std::vector<std::string> flags = {
      "--exclusive", "--hold", "--contiguous",    "--overcommit", "-O",          "--spread-job", "--use-min-nodes",
      "--no-kill",   "-k",     "--oversubscribe", "-s",           "--test-only", "--reboot",     "--wait",
      "-W",          "--nice", "--ignore-pbs",    "--parsable",   "--quiet",     "-Q",           "--verbose",
      "-v"};
  return std::find(flags.begin(), flags.end(), name) != flags.end();
}

bool valid_slurm_name(const std::string& s) {
  return !s.empty() &&
         s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.,-") == std::string::npos;
}

// Why an --sbatch option cannot go into the script ("" when it can): the options the
// script sets for the run's own sake, and those submit has a flag for.
std::string sbatch_option_problem(const std::string& opt, int gpus_per_node) {
  if (opt.size() < 2 || opt[0] != '-')
    return "expected an sbatch option such as --qos=high, --mem=64G or --constraint=a100 (give it as "
           "--sbatch=--qos=high)";
  if (opt.find_first_of("\n\r") != std::string::npos) return "expected one option, got a line break";
  const std::string name = opt.substr(0, opt.find_first_of("= "));
  static const std::vector<std::pair<std::vector<std::string>, std::string>> owned = {
      {{"--nodes", "-N"}, "use submit's --nodes"},
      {{"--time", "-t"}, "use submit's --time"},
      {{"--partition", "-p"}, "use submit's --partition"},
      {{"--account", "-A"}, "use submit's --account"},
      {{"--gpus-per-node"}, "use submit's --gpus-per-node"},
      {{"--cpus-per-task", "-c", "--cpus-per-gpu"}, "use submit's --cpus-per-gpu or --cpus-per-node"},
      {{"--ntasks", "-n", "--ntasks-per-node"}, "the script runs one rank per node"},
      {{"--output", "-o", "--open-mode", "--error", "-e"}, "the script keeps every restart in DIR/slurm-JOBID.out"},
      {{"--signal", "--requeue", "--no-requeue"}, "the script's own warning signal and requeue (use --grace-s)"}};
  for (const auto& [names, why] : owned)
    if (std::find(names.begin(), names.end(), name) != names.end()) return "set by the job script: " + why;
  if (opt.find_first_of("= ") == std::string::npos && !sbatch_flag_only(name))
    return "expected a value: " + name + "=VALUE (as --sbatch=" + name + "=VALUE)";
  // --gres=gpu:TYPE:N or --gpus=TYPE:N names the node's GPUs: N must be --gpus-per-node.
  if (name == "--gres" && opt.find("gpu") != std::string::npos) {
    const std::string spec = opt.substr(opt.find_first_of("= ") + 1);
    const std::string count = spec.substr(spec.rfind(':') + 1);
    if (spec.rfind("gpu", 0) != 0 || !all_digits(count) || std::stoi(count) != gpus_per_node)
      return std::string("expected gpu[:TYPE]:N with N the --gpus-per-node (")
          .append(std::to_string(gpus_per_node))
          .append(")");
  }
  return "";
}

bool names_gpus(const std::vector<std::string>& opts) {
  for (const std::string& o : opts)
    if (o.rfind("--gres=gpu", 0) == 0 || o.rfind("--gres gpu", 0) == 0) return true;
  return false;
}

std::vector<std::string> validate(const SubmitOptions& o) {
  std::vector<std::string> p;
  if (o.nodes < 1) p.push_back("--nodes: expected an integer >= 1, got " + std::to_string(o.nodes));
  if (o.gpus_per_node < 0)
    p.push_back("--gpus-per-node: expected an integer >= 0, got " + std::to_string(o.gpus_per_node));
  if (o.cpus_per_gpu < 1)
    p.push_back("--cpus-per-gpu: expected an integer >= 1, got " + std::to_string(o.cpus_per_gpu));
  if (o.cpus_per_node < 0)
    p.push_back("--cpus-per-node: expected an integer >= 1, got " + std::to_string(o.cpus_per_node));
  if (o.grace_s < 1) p.push_back("--grace-s: expected an integer >= 1, got " + std::to_string(o.grace_s));
  if (!valid_slurm_time(o.time)) {
    p.push_back("--time: expected HH:MM:SS or D-HH:MM:SS, got \"" + o.time + "\"");
  } else if (const long long s = slurm_time_seconds(o.time); s <= o.grace_s) {
    p.push_back("--time " + o.time + ": Slurm reads it as " + std::to_string(s) + " s, not more than --grace-s " +
                std::to_string(o.grace_s) + " (the warning signal before the limit); give HH:MM:SS, e.g. 01:00:00");
  }
  if (!o.partition.empty() && !valid_slurm_name(o.partition))
    p.push_back("--partition: expected a partition name, got \"" + o.partition + "\"");
  if (!o.account.empty() && !valid_slurm_name(o.account))
    p.push_back("--account: expected an account name, got \"" + o.account + "\"");
  if (o.cells_per_gpu > 0 && o.gpus_per_node == 0)
    p.push_back(
        "--cells-per-gpu: shares a GPU between cells, and --gpus-per-node 0 runs CPU slots (one cell each: "
        "set their number with --cpus-per-node)");
  if (o.mpi != "pmix" && o.mpi != "pmi2" && o.mpi != "none" && o.mpi.rfind("pmix_", 0) != 0)
    p.push_back("--mpi: expected pmix, pmix_v<N>, pmi2 or none (see srun --mpi=list), got \"" + o.mpi + "\"");
  for (const std::string& opt : o.sbatch_options)
    if (std::string why = sbatch_option_problem(opt, o.gpus_per_node); !why.empty())
      p.push_back("--sbatch " + opt + ": " + why);
  for (const std::string& line : o.setup_lines)
    if (line.find_first_of("\n\r") != std::string::npos || line.find('\0') != std::string::npos)
      p.push_back("--setup: one shell line each (give --setup once per line), got one with a line break");
  return p;
}

// Where a path lies on a file system local to each node (tmpfs, ramfs, /tmp, /var/tmp,
// /dev/shm, $TMPDIR): the place it names, else "".
std::string node_local_place(const std::string& path) {
  const fs::path a = fs::weakly_canonical(fs::absolute(path));
  std::vector<std::string> roots = {"/tmp", "/var/tmp", "/dev/shm"};
  if (const char* t = options::launcher_env("TMPDIR"); t && *t) roots.emplace_back(t);
  for (const std::string& r : roots) {
    const std::string rel = a.lexically_relative(fs::weakly_canonical(r)).string();
    if (!rel.empty() && rel.rfind("..", 0) != 0) return r;
  }
  struct statfs st {};
  fs::path probe = a;
  while (!probe.empty() && !fs::exists(probe)) probe = probe.parent_path();
  constexpr long kTmpfs = 0x01021994, kRamfs = 0x858458f6;
  if (!probe.empty() && ::statfs(probe.c_str(), &st) == 0 && (st.f_type == kTmpfs || st.f_type == kRamfs))
    return "a tmpfs";
  return "";
}

}  // namespace

std::string render_sbatch(const SubmitOptions& o, const std::string& exe, const std::string& grid_name,
                          int grid_cells_per_gpu) {
  std::string s = kSbatchTemplate;
  const std::string dir = fs::absolute(o.out_dir).lexically_normal().string();
  const int cpus = o.gpus_per_node > 0 ? o.cpus_per_gpu * o.gpus_per_node : (o.cpus_per_node > 0 ? o.cpus_per_node : 2);
  std::string run_args = o.gpus_per_node > 0 ? "--device cuda" : "--device cpu --workers " + std::to_string(cpus);
  if (o.retries >= 0) run_args += " --retries " + std::to_string(o.retries);
  if (o.cells_per_gpu > 0) run_args += " --cells-per-gpu " + std::to_string(o.cells_per_gpu);
  // What the job's run will use (CPU slots ignore the grid's): whether it starts MPS.
  const int cells_per_gpu = o.gpus_per_node == 0 ? 1 : o.cells_per_gpu > 0 ? o.cells_per_gpu : grid_cells_per_gpu;
  if (o.timeout_s > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, " --timeout-s %g", o.timeout_s);
    run_args += buf;
  }
  std::string job = "attnsweep-" + grid_name;
  for (char& c : job)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  replace_all(s, "@VERSION@", ATTNSWEEP_VERSION);
  replace_all(s, "@DATE@", iso_utc_now());
  replace_all(s, "@JOB_NAME@", job);
  replace_all(s, "@NODES@", std::to_string(o.nodes));
  std::string gpu_line = "# (no GPUs: --gpus-per-node 0 runs CPU slots)";
  if (o.gpus_per_node > 0) {
    const std::string g = std::to_string(o.gpus_per_node);
    gpu_line = names_gpus(o.sbatch_options)
                   ? std::string("# (GPUs: the --gres line below, ").append(g).append(" per node)")
                   : std::string("#SBATCH --gpus-per-node=").append(g);
  }
  replace_all(s, "@GPU_LINE@", gpu_line);
  std::string extra, setup;
  for (const std::string& opt : o.sbatch_options)
    extra.append(extra.empty() ? "" : "\n").append("#SBATCH ").append(opt);
  for (const std::string& line : o.setup_lines) setup.append(setup.empty() ? "" : "\n").append(line);
  replace_all(s, "@EXTRA_SBATCH_LINES@", extra.empty() ? "# (no --sbatch options)" : extra);
  replace_all(s, "@SETUP_LINES@", setup.empty() ? "# (no --setup lines)" : setup);
  replace_all(s, "@CPUS_PER_TASK@", std::to_string(cpus));
  replace_all(s, "@TIME@", o.time);
  replace_all(s, "@PARTITION_LINE@",
              o.partition.empty() ? "# (default partition)" : "#SBATCH --partition=" + o.partition);
  replace_all(s, "@ACCOUNT_LINE@", o.account.empty() ? "# (default account)" : "#SBATCH --account=" + o.account);
  replace_all(s, "@GRACE@", std::to_string(o.grace_s));
  replace_all(s, "@MPI@", o.mpi);
  replace_all(s, "@EXE@", shell_quote(exe));
  replace_all(s, "@DIR@", shell_quote(dir));
  replace_all(s, "@RUN_ARGS@", run_args);
  replace_all(s, "@CELLS_PER_GPU@", std::to_string(std::max(1, cells_per_gpu)));
  return s;
}

int submit(const SubmitOptions& o) {
  std::vector<std::string> problems = validate(o);
  if (problems.empty() && o.time.find('-') == std::string::npos && std::count(o.time.begin(), o.time.end(), ':') < 2)
    std::fprintf(stderr,
                 "attnsweep submit: note: --time %s is %lld min in Slurm's MM or MM:SS form (HH:MM:SS for hours)\n",
                 o.time.c_str(), slurm_time_seconds(o.time) / 60);
  Grid grid;
  try {
    grid = load_grid(o.grid_file, o.overrides);
  } catch (const InputError& e) {
    problems.insert(problems.end(), e.problems.begin(), e.problems.end());
  }
  if (fs::exists(o.out_dir) && !fs::is_directory(o.out_dir))
    problems.push_back("--out " + o.out_dir + ": exists and is not a directory");
  if (grid.resources.gpus_per_cell > 1 && o.gpus_per_node > 0 && grid.resources.gpus_per_cell > o.gpus_per_node)
    problems.push_back(o.grid_file + ": resources.gpus_per_cell: " + std::to_string(grid.resources.gpus_per_cell) +
                       " GPUs per cell cannot fit on nodes of " + std::to_string(o.gpus_per_node) + " GPUs");
  else if (o.gpus_per_node > 0)
    for (const Cell& c : grid.cells)  // a cell's own `devices` (an axis or include value)
      if (const int k = c.config.value("devices", 1); k > o.gpus_per_node) {
        problems.push_back(o.grid_file + ": cell " + c.id + ": devices " + std::to_string(k) +
                           " cannot fit on nodes of " + std::to_string(o.gpus_per_node) + " GPUs");
        break;
      }
  if (!o.dry_run && ::access("/usr/bin/sbatch", X_OK) != 0 && std::system("command -v sbatch >/dev/null 2>&1") != 0)
    problems.push_back(
        "sbatch: not found (run submit on a Slurm login node, or use --dry-run to only write the script)");
  if (!problems.empty()) {
    for (const std::string& p : problems) std::fprintf(stderr, "attnsweep submit: %s\n", p.c_str());
    return 2;
  }
  try {
    make_dirs(o.out_dir);
    const std::string probe = o.out_dir + "/.write-test";
    atomic_write_text(probe, "ok\n", false);
    fs::remove(probe);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attnsweep submit: --out %s: not writable (%s)\n", o.out_dir.c_str(), e.what());
    return 2;
  }
  // The job runs the grid as it was at submit time, whatever happens to the file later.
  const std::string grid_copy = o.out_dir + "/grid.json";
  // With overrides: the grid as the overrides make it, which the job then runs.
  const std::string text = grid_text_with_overrides(o.grid_file, o.overrides);
  if (fs::exists(grid_copy) && read_text(grid_copy) != text) {
    // Load the existing copy: same cells means a resubmit; different cells are refused
    // later by `run` (manifest) unless --force, exactly as for a local run.
    try {
      if (load_grid(grid_copy).hash != grid.hash) {
        std::fprintf(stderr,
                     "attnsweep submit: %s holds a different grid (%s): use another --out (submit does not "
                     "replace a directory's grid: its finished cells belong to that grid)\n",
                     o.out_dir.c_str(), grid_copy.c_str());
        return 2;
      }
    } catch (const InputError&) {
    }
  }
  // A job.sbatch edited since submit wrote it (its header says it is safe to edit) is
  // the user's: never replaced. Submit writes the script's SHA-256 beside it.
  const std::string script = o.out_dir + "/job.sbatch", stamp = o.out_dir + "/.job.sbatch.sha256";
  if (fs::exists(script) && (!fs::exists(stamp) || sha256_hex(read_text(script)) != read_text(stamp).substr(0, 64))) {
    std::fprintf(stderr,
                 "attnsweep submit: %s was edited since submit wrote it (or was not written by submit): it is "
                 "kept. Submit it as it is with `sbatch %s` (the run resumes what %s holds), or move it away to "
                 "have submit write a new one\n",
                 script.c_str(), script.c_str(), o.out_dir.c_str());
    return 2;
  }
  for (const auto& [what, path] :
       {std::pair<std::string, std::string>{"--out", o.out_dir}, {"the attnsweep binary", self_executable()}})
    if (const std::string place = node_local_place(path); !place.empty())
      std::fprintf(stderr,
                   "attnsweep submit: warning: %s (%s) is on %s, local to each node: the job's nodes see it only if "
                   "they are this machine; put it on a file system every node mounts\n",
                   what.c_str(), path.c_str(), place.c_str());
  atomic_write_text(grid_copy, text);
  const std::string rendered = render_sbatch(o, self_executable(), grid.name, grid.resources.cells_per_gpu);
  atomic_write_text(script, rendered);
  atomic_write_text(stamp, sha256_hex(rendered) + "\n");
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
  if (o.dry_run) {
    std::printf("%s (%zu cells; not submitted: --dry-run)\n", script.c_str(), grid.cells.size());
    return 0;
  }
  const std::string cmd = "sbatch --parsable " + shell_quote(script) + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) {
    std::fprintf(stderr, "attnsweep submit: cannot run sbatch\n");
    return 1;
  }
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int status = ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  if (status != 0) {
    std::fprintf(stderr, "attnsweep submit: sbatch failed: %s\n", out.c_str());
    return 1;
  }
  const std::string job_id = out.substr(0, out.find(';'));  // --parsable: "id[;cluster]"
  std::printf("%s\n", job_id.c_str());
  std::fprintf(stderr,
               "attnsweep submit: job %s, %zu cells -> %s (watch: attnsweep status %s; stop: scancel %s; it requeues "
               "itself after preemption)\n",
               job_id.c_str(), grid.cells.size(), o.out_dir.c_str(), o.out_dir.c_str(), job_id.c_str());
  return 0;
}

}  // namespace attnsweep
