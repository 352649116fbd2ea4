// One rank's worker slots: children running `attnsweep train`, one attempt each, with
// their timeouts, and how many slots a rank has (its device and threads).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <thread>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "coordinator/messages.h"
#include "coordinator/process.h"
#include "coordinator/rundir.h"
#include "coordinator/sweep.h"
#include "results/cell_file.h"
#include "worker/cpu_env.h"
#include "worker/run_cell.h"

namespace attnsweep {

// The worker slots of one rank: children running `attnsweep train`.
class LocalSlots {
 public:
  LocalSlots(const RunDir& paths, int count, std::vector<std::string> gpus, std::string device, int threads, int rank)
      : paths_(paths),
        slots_(static_cast<size_t>(count)),
        gpus_(std::move(gpus)),
        device_(std::move(device)),
        threads_(threads),
        rank_(rank),
        host_(hostname()),
        exe_(self_executable()),
        // More threads than cores in all: waiting threads sleep (worker/cpu_env.h).
        cpu_env_(cpu_env_fixes(static_cast<int64_t>(count) * threads >
                               static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())))) {}

  int free() const {
    return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pid == 0; }));
  }
  bool busy() const { return free() < static_cast<int>(slots_.size()); }
  int size() const { return static_cast<int>(slots_.size()); }

  // Starts the attempt on a free slot; a failure to start is reported as a failed attempt.
  std::optional<AttemptResult> launch(const Assignment& a, double now) {
    // A cell of `devices: n` takes n slots of this rank: the first holds the child, the
    // others are marked taken by it; its GPUs are those of all n slots.
    std::vector<size_t> taken;
    for (size_t j = 0; j < slots_.size() && static_cast<int>(taken.size()) < a.slots; ++j)
      if (slots_[j].pid == 0) taken.push_back(j);
    if (taken.empty() || static_cast<int>(taken.size()) < a.slots)
      throw std::logic_error("launch without enough free slots");
    const size_t k = taken[0];
    ChildSpec spec;
    spec.argv = {exe_,    "train",     paths_.cell_file(a.id),   "--out",        paths_.runs(a.id),      "--device",
                 device_, "--threads", std::to_string(threads_), "--checkpoint", paths_.checkpoint(a.id)};
    spec.env = {{"ATTNSWEEP_ATTEMPT", std::to_string(a.attempt)},
                {"OMP_NUM_THREADS", std::to_string(threads_)},
                {"OPENBLAS_NUM_THREADS", std::to_string(threads_)}};
    if (!gpus_.empty()) {
      std::string visible;
      for (size_t j : taken) visible += (visible.empty() ? "" : ",") + gpus_[j % gpus_.size()];
      spec.env.push_back({"CUDA_VISIBLE_DEVICES", visible});
    }
    // The start-up settings `train` would otherwise re-exec itself for (worker/cpu_env.h):
    // one exec per attempt, not two.
    for (const auto& kv : cpu_env_) spec.env.push_back(kv);
    spec.env.push_back({"ATTNSWEEP_CPU_ENV_SET", "1"});
    spec.log_path = paths_.log(a.id);
    spec.log_header = "=== attnsweep: cell " + a.id + " attempt " + std::to_string(a.attempt) + " on " + host_ +
                      " rank " + std::to_string(rank_) + " slot " + std::to_string(k) + " at " + iso_utc_now() + " ===";
    Slot& s = slots_[k];
    try {
      s.pid = spawn_child(spec);
    } catch (const std::exception& e) {
      s = Slot{};
      AttemptResult r = base_result(a, static_cast<int>(k));
      r.reason = std::string("could not start: ") + e.what();
      return r;
    }
    s.a = a;
    s.started = now;
    s.deadline = a.timeout_s > 0 ? now + a.timeout_s : std::numeric_limits<double>::infinity();
    for (size_t j = 1; j < taken.size(); ++j) {
      slots_[taken[j]].pid = s.pid;
      slots_[taken[j]].secondary = true;
    }
    return std::nullopt;
  }

  // Reaps finished children and enforces timeouts.
  std::vector<AttemptResult> poll(double now) {
    std::vector<AttemptResult> out;
    for (;;) {
      const ChildExit e = reap_child();
      if (e.pid == 0) break;
      for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k].pid == e.pid && !slots_[k].secondary) out.push_back(finish(k, e, now));
      for (Slot& sl : slots_)
        if (sl.pid == e.pid) sl = Slot{};
    }
    for (Slot& s : slots_) {
      if (s.pid == 0 || s.secondary) continue;
      if (!s.timed_out && now >= s.deadline) {
        // A hung cell: TERM first (a trainer checkpoints and leaves), KILL if it lingers.
        s.timed_out = true;
        signal_child(s.pid, SIGTERM);
        s.kill_at = now + 2.0;
      } else if (s.timed_out && now >= s.kill_at) {
        signal_child(s.pid, SIGKILL);
        s.kill_at = std::numeric_limits<double>::infinity();
      }
    }
    return out;
  }

  void forward(int sig) {
    for (Slot& s : slots_)
      if (s.pid != 0 && !s.secondary) {
        s.stopped = true;
        signal_child(s.pid, sig);
      }
  }

  double next_deadline() const {
    double t = std::numeric_limits<double>::infinity();
    for (const Slot& s : slots_)
      if (s.pid != 0 && !s.secondary) t = std::min(t, s.timed_out ? s.kill_at : s.deadline);
    return t;
  }

 private:
  struct Slot {
    pid_t pid = 0;
    Assignment a;
    double started = 0, deadline = 0, kill_at = 0;
    bool timed_out = false, stopped = false;
    bool secondary = false;  // taken by the child of another slot (a multi-device cell)
  };

  AttemptResult base_result(const Assignment& a, int slot) const {
    AttemptResult r;
    r.index = a.index;
    r.id = a.id;
    r.attempt = a.attempt;
    r.rank = rank_;
    r.slot = slot;
    r.host = host_;
    return r;
  }

  AttemptResult finish(size_t k, const ChildExit& e, double now) const {
    const Slot& s = slots_[k];
    AttemptResult r = base_result(s.a, static_cast<int>(k));
    r.wall_s = now - s.started;
    if (s.timed_out) {
      r.outcome = CellStatus::failed;
      char buf[64];
      std::snprintf(buf, sizeof buf, "timed out after %.1f s", s.a.timeout_s);
      r.reason = buf;
    } else if (e.exited && e.code == 0) {
      try {
        const CellSummary sum = read_cell_summary(paths_.runs(s.a.id));
        r.outcome = sum.status == CellStatus::diverged ? CellStatus::diverged : CellStatus::complete;
      } catch (const std::exception& ex) {
        r.outcome = CellStatus::failed;
        r.reason = std::string("exit code 0 but no valid result: ") + ex.what();
      }
    } else if (e.exited && e.code == 75) {
      r.outcome = CellStatus::interrupted;
      r.reason = "interrupted by a signal";
    } else {
      r.outcome = s.stopped ? CellStatus::interrupted : CellStatus::failed;
      r.reason = describe_exit(e);
    }
    // A child killed while writing leaves its temporary result behind: nobody else writes it.
    if (r.outcome != CellStatus::complete && r.outcome != CellStatus::diverged)
      remove_stale_temporaries(paths_.dir() + "/runs", s.a.id + ".h5.tmp.");
    return r;
  }

  const RunDir& paths_;
  std::vector<Slot> slots_;
  std::vector<std::string> gpus_;
  std::string device_;
  int threads_;
  int rank_;
  std::string host_;
  std::string exe_;
  std::vector<std::pair<std::string, std::string>> cpu_env_;
};

// The rank's device and slots: one slot per visible GPU (cuda), else --workers or one
// per core; threads = --threads or cores / slots.
struct RankSetup {
  std::string device;  // cpu | cuda
  int slots = 1;
  int threads = 1;
  std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES value per slot (cuda)
};
RankSetup setup_rank(const RunOptions& opt);

// What ranks > 0 run: ask rank 0 for cells while a slot is free, run them, report each
// result, stop when told. heartbeat_every_s > 0: there is no heartbeat thread (MPI
// without MPI_THREAD_MULTIPLE), so this loop sends them itself, and a hung file system
// silences it. Returns the rank's exit code.
int worker_loop(LocalSlots& local, int rank, double heartbeat_every_s);

}  // namespace attnsweep
