// Which ranks are alive, and which attempts each one holds: the policy behind the
// heartbeats, with no transport (unit-tested alone, tests/unit/test_liveness.cpp).
//
// Rank 0 notes every message from a rank (heard), every attempt it hands a rank
// (assigned) and every result it takes (take_result). A rank silent for longer than
// the timeout is lost: it gets no more work, the attempts it held are given back to
// the scheduler, and anything it sends later is ignored, so a late result is never
// counted twice.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace attnsweep {

// A heartbeat every `timeout / 8`, at most 5 s: a rank must miss about eight in a row
// before it is declared lost.
double heartbeat_interval_s(double rank_timeout_s);

constexpr double kDefaultRankTimeoutS = 180;

struct LostRank {
  int rank = 0;
  double silent_s = 0;        // silence when it was declared lost
  std::vector<size_t> cells;  // the cells it held, given back (grid indices)
};

class Liveness {
 public:
  // Ranks 1 .. world-1 are watched (rank 0 is the one watching); all heard at `now`.
  Liveness(int world, double timeout_s, double now);

  // Any message from `rank` proves it alive. Returns false for a lost rank.
  bool heard(int rank, double now);
  // The rank said bye: it has nothing running and is no longer watched.
  void retire(int rank);

  void assigned(int rank, size_t cell, int attempt);
  // A result for (cell, attempt) from `rank`: true when it is the attempt that rank
  // holds (take it), false when the rank is lost or the attempt is not its own (a late
  // or duplicate result: ignore it).
  bool take_result(int rank, size_t cell, int attempt);

  // Ranks silent for longer than the timeout, newly lost now, with their cells.
  std::vector<LostRank> check(double now);
  // The earliest time a watched rank can become lost (infinity when none is watched).
  double next_deadline() const;

  bool lost(int rank) const { return ranks_[static_cast<size_t>(rank)].lost; }
  bool any_lost() const;
  size_t in_flight(int rank) const { return ranks_[static_cast<size_t>(rank)].held.size(); }
  double timeout_s() const { return timeout_s_; }

 private:
  struct Held {
    size_t cell;
    int attempt;
  };
  struct Rank {
    double last_heard = 0;
    bool lost = false, retired = false;
    std::vector<Held> held;
  };
  std::vector<Rank> ranks_;
  double timeout_s_;
};

}  // namespace attnsweep
