// One rank's worker slots: children running `attnsweep train`, one attempt each, with
// their timeouts; how many slots a rank has (its device, cells per GPU and threads),
// which device each slot runs on, and which free slots a cell takes.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/cpu_env.h"
#include "base/options.h"
#include "base/process.h"
#include "base/utc_time.h"
#include "coordinator/grid.h"
#include "coordinator/messages.h"
#include "coordinator/run_options.h"
#include "coordinator/rundir.h"
#include "results/cell_file.h"
#include "worker/training/run_cell.h"

namespace attnsweep {

// ---- slot planning (pure: unit-tested without processes or MPI) ------------------------
//
// A rank's slots run on its devices: G visible GPUs with K cells per GPU make G x K
// slots, slot j on GPU j % G (so the first G slots take one cell per GPU, the next G a
// second, ...); CPU slots are each their own device. A cell of `devices: n` takes n free
// slots on n distinct devices: two of its replicas never share one GPU. When no n free
// slots on distinct devices exist (say the free slots are all on one GPU), the cell
// waits, and the scheduler hands out cells that fit meanwhile.

// The device of each slot: `devices` x `per_device` slots, slot j on device j % devices.
std::vector<int> slot_devices(int devices, int per_device);

// A free slot of a rank and the device it runs on.
struct FreeSlot {
  int slot = 0;
  int device = 0;
};

// The distinct devices among `free`: the most devices a cell could take now (what the
// scheduler's `free_slots` is, coordinator/scheduler.h).
int distinct_devices(const std::vector<FreeSlot>& free);

// The slots a cell of `need` devices takes from `free`: one slot on each of `need`
// distinct devices, the devices with the most free slots (the least loaded) first, ties
// to the lowest slot; on each device its lowest free slot. Empty when fewer than `need`
// devices have a free slot: the cell waits.
std::vector<int> choose_slots(const std::vector<FreeSlot>& free, int need);

// The cause a failed `attnsweep train` gave last in its log ("cell 3f..: failed: the
// program exited 0 without a final record ..."), for the failure's reason; "" when none.
std::string failure_from_log(const std::string& log_path);

// Appends one line to a cell's log (the header of an attempt run by another cell's child).
inline void append_log_line(const std::string& path, const std::string& line) {
  std::ofstream f(path, std::ios::app);
  f << line << "\n";
}

// The worker slots of one rank: children running `attnsweep train`.
class LocalSlots {
 public:
  // device_of[j]: the device of slot j (slot_devices); gpus[d]: device d's
  // CUDA_VISIBLE_DEVICES value (empty on CPU slots).
  LocalSlots(const RunDir& paths, std::vector<int> device_of, std::vector<std::string> gpus, std::string device,
             int threads, int rank)
      : paths_(paths),
        slots_(device_of.size()),
        device_of_(std::move(device_of)),
        gpus_(std::move(gpus)),
        device_(std::move(device)),
        threads_(threads),
        rank_(rank),
        host_(hostname()),
        exe_(self_executable()),
        // More threads than cores in all: waiting threads sleep (base/cpu_env.h).
        cpu_env_(cpu_env_fixes(static_cast<int64_t>(slots_.size()) * threads >
                               static_cast<int64_t>(std::max(1u, std::thread::hardware_concurrency())))) {}

  int free() const {
    return static_cast<int>(std::count_if(slots_.begin(), slots_.end(), [](const Slot& s) { return s.pid == 0; }));
  }
  // The free slots and their devices, for choose_slots.
  std::vector<FreeSlot> free_slots() const {
    std::vector<FreeSlot> out;
    for (size_t j = 0; j < slots_.size(); ++j)
      if (slots_[j].pid == 0) out.push_back({static_cast<int>(j), device_of_[j]});
    return out;
  }
  bool is_free(int j) const { return j >= 0 && j < size() && slots_[static_cast<size_t>(j)].pid == 0; }
  int device_of(int j) const { return device_of_[static_cast<size_t>(j)]; }
  bool busy() const { return free() < static_cast<int>(slots_.size()); }
  int size() const { return static_cast<int>(slots_.size()); }

  // Starts the attempt on the free slots `taken` (choose_slots: one per device the cell
  // trains on); a failure to start is reported as a failed attempt of each of its cells
  // (empty: started). A group (a.also) is one child that trains all its cells.
  std::vector<AttemptResult> launch(const Assignment& a, const std::vector<int>& taken, double now) {
    // A cell of `devices: n` takes n slots of this rank, on n distinct devices: the first
    // holds the child, the others are marked taken by it; its GPUs are those of all n.
    if (taken.empty() || static_cast<int>(taken.size()) != a.slots)
      throw std::logic_error("launch: " + std::to_string(taken.size()) + " slots for a cell of " +
                             std::to_string(a.slots));
    for (size_t i = 0; i < taken.size(); ++i) {
      if (!is_free(taken[i])) throw std::logic_error("launch on a slot that is not free");
      for (size_t j = 0; j < i; ++j)
        if (device_of(taken[j]) == device_of(taken[i]))
          throw std::logic_error("launch of a multi-device cell on two slots of one device");
    }
    const size_t k = static_cast<size_t>(taken[0]);
    const std::vector<CellAttempt> cells = a.cells();
    ChildSpec spec;
    spec.argv = {exe_, "train"};
    for (const CellAttempt& c : cells) spec.argv.push_back(paths_.cell_file(c.id));
    spec.argv.push_back("--out");
    for (const CellAttempt& c : cells) spec.argv.push_back(paths_.runs(c.id));
    spec.argv.push_back("--checkpoint");
    for (const CellAttempt& c : cells) spec.argv.push_back(paths_.checkpoint(c.id));
    spec.argv.push_back("--progress");
    for (const CellAttempt& c : cells) {
      spec.argv.push_back(paths_.progress(c.id));
      std::error_code ec;  // an earlier attempt's: not this one's progress
      std::filesystem::remove(paths_.progress(c.id), ec);
    }
    for (const std::string& arg :
         {std::string("--device"), device_, std::string("--threads"), std::to_string(threads_)})
      spec.argv.push_back(arg);
    spec.env = {{options::kAttempt, std::to_string(a.attempt)},
                {"OMP_NUM_THREADS", std::to_string(threads_)},
                {"OPENBLAS_NUM_THREADS", std::to_string(threads_)}};
    if (!gpus_.empty()) {
      std::string visible;
      for (int j : taken) visible += (visible.empty() ? "" : ",") + gpus_[static_cast<size_t>(device_of(j))];
      spec.env.push_back({"CUDA_VISIBLE_DEVICES", visible});
    }
    // The start-up settings `train` would otherwise re-exec itself for (base/cpu_env.h):
    // one exec per attempt, not two.
    for (const auto& kv : cpu_env_) spec.env.push_back(kv);
    spec.env.push_back({options::kCpuEnvSet, "1"});
    spec.log_path = paths_.log(a.id);
    const std::string where = " on " + host_ + " rank " + std::to_string(rank_) + " slot " + std::to_string(k) +
                              " at " + iso_utc_now() + " ===";
    spec.log_header = "=== attnsweep: cell " + a.id + " attempt " + std::to_string(a.attempt) +
                      (a.also.empty() ? "" : " with " + std::to_string(a.also.size()) + " more cells of its group") +
                      where;
    // The other cells' logs say where their attempt's output went: one child, one log.
    for (const CellAttempt& c : a.also)
      append_log_line(paths_.log(c.id), "=== attnsweep: cell " + c.id + " attempt " + std::to_string(c.attempt) +
                                            " trained in the group of cell " + a.id +
                                            " (its output: " + paths_.log(a.id) + ")" + where);
    Slot& s = slots_[k];
    try {
      s.pid = spawn_child(spec);
    } catch (const std::exception& e) {
      s = Slot{};
      std::vector<AttemptResult> out;
      for (const CellAttempt& c : cells) {
        AttemptResult r = base_result(c, static_cast<int>(k));
        r.reason = std::string("could not start: ") + e.what();
        out.push_back(r);
      }
      return out;
    }
    s.a = a;
    s.started = now;
    s.launched = std::filesystem::file_time_type::clock::now();
    // The timeout is each cell's: a group trains its cells together, in up to that many times as long.
    const double limit = a.timeout_s * static_cast<double>(cells.size());
    s.deadline = a.timeout_s > 0 ? now + limit : std::numeric_limits<double>::infinity();
    for (size_t j = 1; j < taken.size(); ++j) {
      slots_[static_cast<size_t>(taken[j])].pid = s.pid;
      slots_[static_cast<size_t>(taken[j])].secondary = true;
    }
    return {};
  }

  // Reaps finished children and enforces timeouts.
  std::vector<AttemptResult> poll(double now) {
    std::vector<AttemptResult> out;
    for (;;) {
      const ChildExit e = reap_child();
      if (e.pid == 0) break;
      for (size_t k = 0; k < slots_.size(); ++k)
        if (slots_[k].pid == e.pid && !slots_[k].secondary)
          for (const CellAttempt& c : slots_[k].a.cells()) out.push_back(finish(k, c, e, now));
      for (Slot& sl : slots_)
        if (sl.pid == e.pid) sl = Slot{};
    }
    for (Slot& s : slots_) {
      if (s.pid == 0 || s.secondary) continue;
      if (!s.timed_out && now >= s.deadline) {
        // A hung cell: TERM first (a trainer checkpoints and leaves), KILL if it lingers.
        // Its log says so before the child's own line about the signal.
        s.timed_out = true;
        for (const CellAttempt& c : s.a.cells())
          append_log_line(paths_.log(c.id), "attnsweep run: cell " + c.id + " attempt " + std::to_string(c.attempt) +
                                                " " + timeout_text(s.a) +
                                                ": stopping it (SIGTERM, then SIGKILL after 2 s) at " + iso_utc_now());
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
    std::filesystem::file_time_type launched;  // a result file older than this is not this attempt's
    bool timed_out = false, stopped = false;
    bool secondary = false;  // taken by the child of another slot (a multi-device cell)
  };

  // "timed out after 10.0 s": a group's limit is its cells' together.
  static std::string timeout_text(const Assignment& a) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "timed out after %.1f s", a.timeout_s * static_cast<double>(1 + a.also.size()));
    return buf;
  }

  AttemptResult base_result(const CellAttempt& c, int slot) const {
    AttemptResult r;
    r.index = c.index;
    r.id = c.id;
    r.attempt = c.attempt;
    r.rank = rank_;
    r.slot = slot;
    r.host = host_;
    return r;
  }

  // How cell c's attempt in slot k's child ended. A group's child writes each cell's
  // result as it finishes: a cell whose result this attempt wrote is done, whatever
  // became of the others.
  AttemptResult finish(size_t k, const CellAttempt& c, const ChildExit& e, double now) const {
    const Slot& s = slots_[k];
    AttemptResult r = base_result(c, static_cast<int>(k));
    r.wall_s = now - s.started;
    const std::string result = paths_.runs(c.id);
    std::error_code ec;
    const bool written = !s.a.also.empty() && !(e.exited && e.code == 0) && std::filesystem::exists(result, ec) &&
                         std::filesystem::last_write_time(result, ec) >= s.launched &&
                         cell_file_valid(result, c.id, nullptr);
    if (written || (!s.timed_out && e.exited && e.code == 0)) {
      try {
        const CellSummary sum = read_cell_summary(result);
        r.outcome = sum.status == CellStatus::diverged ? CellStatus::diverged : CellStatus::complete;
      } catch (const std::exception& ex) {
        r.outcome = CellStatus::failed;
        r.reason = std::string("exit code 0 but no valid result: ") + ex.what();
      }
    } else if (s.timed_out) {
      r.outcome = CellStatus::failed;
      r.reason = timeout_text(s.a);
    } else if (e.exited && e.code == 75) {
      r.outcome = CellStatus::interrupted;
      r.reason = "interrupted by a signal";
    } else {
      r.outcome = s.stopped ? CellStatus::interrupted : CellStatus::failed;
      // The cell's child (attnsweep train) exits 1 or 65 with the cause in its log: the
      // cause is the reason (it names the program's own exit code, for a command cell);
      // the child's code is attnsweep's, not the program's.
      r.reason = "attnsweep train " + describe_exit(e);
      if (e.exited && (e.code == 1 || e.code == kExitFailedNoRetry))
        if (const std::string why = failure_from_log(paths_.log(s.a.id)); !why.empty()) r.reason = why;
      if (e.exited && e.code == kExitFailedNoRetry) {
        r.retry = false;
        r.reason += " (not retried: another attempt would fail the same way)";
      }
    }
    // A child killed while writing leaves its temporary result behind: nobody else writes it.
    if (r.outcome != CellStatus::complete && r.outcome != CellStatus::diverged)
      remove_stale_temporaries(paths_.dir() + "/runs", c.id + ".h5.tmp.");
    return r;
  }

  const RunDir& paths_;
  std::vector<Slot> slots_;
  std::vector<int> device_of_;     // per slot
  std::vector<std::string> gpus_;  // per device (cuda)
  std::string device_;
  int threads_;
  int rank_;
  std::string host_;
  std::string exe_;
  std::vector<std::pair<std::string, std::string>> cpu_env_;
};

// The rank's device and slots: cells_per_gpu slots per visible GPU (cuda), else
// --workers or one per core; threads = --threads or cores / slots.
struct RankSetup {
  std::string device;  // cpu | cuda
  int slots = 1;
  int devices = 1;        // distinct devices: GPUs (cuda) or slots (cpu)
  int cells_per_gpu = 1;  // 1 on CPU slots
  int threads = 1;
  std::vector<int> device_of;     // per slot (slot_devices)
  std::vector<std::string> gpus;  // CUDA_VISIBLE_DEVICES value per GPU (cuda)
};
// cells_per_gpu: K of GPU slots (the flag, else the grid's); ignored on CPU slots.
RankSetup setup_rank(const RunOptions& opt, int cells_per_gpu = 1);

// What ranks > 0 run: ask rank 0 for cells while a slot is free, run them, report each
// result, stop when told. heartbeat_every_s > 0: there is no heartbeat thread (MPI
// without MPI_THREAD_MULTIPLE), so this loop sends them itself, and a hung file system
// silences it. Returns the rank's exit code.
int worker_loop(LocalSlots& local, int rank, double heartbeat_every_s);

}  // namespace attnsweep
