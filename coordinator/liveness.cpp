#include "coordinator/liveness.h"

#include <algorithm>
#include <limits>

namespace attnsweep {

double heartbeat_interval_s(double rank_timeout_s) {
  return std::clamp(rank_timeout_s / 8.0, 0.05, 5.0);
}

Liveness::Liveness(int world, double timeout_s, double now)
    : ranks_(static_cast<size_t>(std::max(world, 1))), timeout_s_(timeout_s) {
  for (Rank& r : ranks_) r.last_heard = now;
  ranks_[0].retired = true;  // rank 0 does the watching
}

bool Liveness::heard(int rank, double now) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (r.lost) return false;
  r.last_heard = std::max(r.last_heard, now);
  return true;
}

void Liveness::retire(int rank) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (!r.lost) r.retired = true;
}

void Liveness::assigned(int rank, size_t cell, int attempt) {
  ranks_[static_cast<size_t>(rank)].held.push_back({cell, attempt});
}

bool Liveness::take_result(int rank, size_t cell, int attempt) {
  Rank& r = ranks_[static_cast<size_t>(rank)];
  if (r.lost) return false;
  const auto it =
      std::find_if(r.held.begin(), r.held.end(), [&](const Held& h) { return h.cell == cell && h.attempt == attempt; });
  if (it == r.held.end()) return false;
  r.held.erase(it);
  return true;
}

std::vector<LostRank> Liveness::check(double now) {
  std::vector<LostRank> out;
  for (size_t k = 1; k < ranks_.size(); ++k) {
    Rank& r = ranks_[k];
    if (r.lost || r.retired || now - r.last_heard <= timeout_s_) continue;
    r.lost = true;
    LostRank l;
    l.rank = static_cast<int>(k);
    l.silent_s = now - r.last_heard;
    for (const Held& h : r.held) l.cells.push_back(h.cell);
    r.held.clear();
    out.push_back(std::move(l));
  }
  return out;
}

double Liveness::next_deadline() const {
  double t = std::numeric_limits<double>::infinity();
  for (const Rank& r : ranks_)
    if (!r.lost && !r.retired) t = std::min(t, r.last_heard + timeout_s_);
  return t;
}

bool Liveness::any_lost() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.lost; });
}

}  // namespace attnsweep
