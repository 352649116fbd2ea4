// The scheduling policy, with no transport: which cell runs next, and what a finished
// attempt means (done, retry after a back-off, failed for good). Unit-tested alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "experiments/cell_status.h"

namespace attnsweep {

// A cell's state is a CellStatus of pending, running, complete, diverged or failed; an
// attempt's outcome one of complete, diverged, failed or interrupted.

struct SchedulerConfig {
  int retries = 2;         // attempts after the first
  double backoff_s = 2.0;  // before the first retry; doubles each retry
  double backoff_max_s = 60.0;
};

struct Decision {
  enum Kind { done, retry, failed, requeued } kind = done;
  double retry_at = 0;  // retry: not before this time
};

class Scheduler {
 public:
  // slots[i]: worker slots (devices) cell i needs on one rank; empty = 1 each.
  Scheduler(std::vector<double> est_cost, SchedulerConfig cfg, std::vector<int> slots = {});

  // A cell already finished before this run (resume): never handed out.
  void mark_finished(size_t i, CellStatus s);
  // Longest estimated cost first among pending cells whose back-off has passed and
  // that fit in `free_slots` slots of one rank.
  std::optional<size_t> next(double now, int free_slots = 1 << 30);
  // Cell i, if it is pending, its back-off has passed and it takes one slot: marked
  // running as next() would (a companion of a group, coordinator/fusion.h).
  bool claim(size_t i, double now);
  // Whether claim(i, now) would take it.
  bool claimable(size_t i, double now) const {
    const Entry& e = cells_[i];
    return e.state == CellStatus::pending && e.not_before <= now && e.slots == 1;
  }
  int slots(size_t i) const { return cells_[i].slots; }
  // retry false: a failure another attempt would repeat, failed at once.
  Decision on_result(size_t i, CellStatus o, double now, const std::string& reason = "", bool retry = true);

  CellStatus state(size_t i) const { return cells_[i].state; }
  int attempts(size_t i) const { return cells_[i].attempts; }
  const std::string& last_error(size_t i) const { return cells_[i].last_error; }
  size_t size() const { return cells_.size(); }
  size_t count(CellStatus s) const { return counts_[static_cast<int>(s)]; }
  bool all_terminal() const { return count(CellStatus::pending) == 0 && count(CellStatus::running) == 0; }
  // Earliest time a pending cell becomes ready (infinity when none is pending).
  double next_ready_time() const;

 private:
  struct Entry {
    double cost = 0;
    int slots = 1;
    CellStatus state = CellStatus::pending;
    int attempts = 0;  // attempts started (interrupted ones are given back)
    double not_before = 0;
    std::string last_error;
  };
  void set_state(size_t i, CellStatus s);
  std::vector<Entry> cells_;
  std::vector<size_t> order_;  // by cost, descending; ties in grid order
  size_t first_open_ = 0;      // order_[0, first_open_) holds no pending cell (reset on a requeue)
  size_t counts_[kCellStatusCount] = {};
  SchedulerConfig cfg_;
};

}  // namespace attnsweep
