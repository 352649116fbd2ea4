#include "coordinator/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace attnsweep {

Scheduler::Scheduler(std::vector<double> est_cost, SchedulerConfig cfg, std::vector<int> slots) : cfg_(cfg) {
  cells_.resize(est_cost.size());
  for (size_t i = 0; i < est_cost.size(); ++i) {
    cells_[i].cost = est_cost[i];
    if (i < slots.size()) cells_[i].slots = std::max(1, slots[i]);
  }
  order_.resize(cells_.size());
  std::iota(order_.begin(), order_.end(), size_t{0});
  std::stable_sort(order_.begin(), order_.end(), [&](size_t a, size_t b) { return cells_[a].cost > cells_[b].cost; });
  counts_[static_cast<int>(CellStatus::pending)] = cells_.size();
}

void Scheduler::set_state(size_t i, CellStatus s) {
  --counts_[static_cast<int>(cells_[i].state)];
  cells_[i].state = s;
  ++counts_[static_cast<int>(s)];
}

void Scheduler::mark_finished(size_t i, CellStatus s) {
  set_state(i, s);
}

std::optional<size_t> Scheduler::next(double now, int free_slots) {
  while (first_open_ < order_.size() && cells_[order_[first_open_]].state != CellStatus::pending) ++first_open_;
  for (size_t k = first_open_; k < order_.size(); ++k) {
    Entry& e = cells_[order_[k]];
    if (e.state == CellStatus::pending && e.not_before <= now && e.slots <= free_slots) {
      set_state(order_[k], CellStatus::running);
      ++e.attempts;
      return order_[k];
    }
  }
  return std::nullopt;
}

bool Scheduler::claim(size_t i, double now) {
  if (!claimable(i, now)) return false;
  set_state(i, CellStatus::running);
  ++cells_[i].attempts;
  return true;
}

Decision Scheduler::on_result(size_t i, CellStatus o, double now, const std::string& reason, bool retry) {
  Entry& e = cells_[i];
  Decision d;
  switch (o) {
    case CellStatus::complete:
      set_state(i, CellStatus::complete);
      d.kind = Decision::done;
      break;
    case CellStatus::diverged:
      set_state(i, CellStatus::diverged);
      d.kind = Decision::done;
      break;
    case CellStatus::interrupted:
      // Not the cell's fault: give the attempt back, run it again from the start.
      --e.attempts;
      set_state(i, CellStatus::pending);
      first_open_ = 0;
      d.kind = Decision::requeued;
      break;
    case CellStatus::pending:
    case CellStatus::running:
      throw std::logic_error("Scheduler::on_result: an attempt's outcome cannot be " + std::string(to_string(o)));
    case CellStatus::failed:
      e.last_error = reason;
      if (e.attempts > cfg_.retries || !retry) {
        set_state(i, CellStatus::failed);
        d.kind = Decision::failed;
      } else {
        const double wait = std::min(cfg_.backoff_max_s, cfg_.backoff_s * std::pow(2.0, e.attempts - 1));
        e.not_before = now + wait;
        set_state(i, CellStatus::pending);
        first_open_ = 0;
        d.kind = Decision::retry;
        d.retry_at = e.not_before;
      }
      break;
  }
  return d;
}

double Scheduler::next_ready_time() const {
  double t = std::numeric_limits<double>::infinity();
  for (size_t k = first_open_; k < order_.size(); ++k) {
    const Entry& e = cells_[order_[k]];
    if (e.state == CellStatus::pending) t = std::min(t, e.not_before);
  }
  return t;
}

}  // namespace attnsweep
