// Every MPI message of the sweep, in one place. Payloads are JSON text: only control
// messages and one-line summaries cross MPI; results travel as files.
//
//   worker -> 0   request   {slot, device}: this slot of mine (on that device) is free
//   0 -> worker   assign    {index, id, attempt, timeout_s, slots, on_slots, also}: run it on
//                           these offered slots (one per device it trains on, all distinct),
//                           with the cells of `also` ([{index, id, attempt}]) in the same child
//                           (a group, trained as one; a result comes back for each)
//   worker -> 0   result    {index, id, attempt, outcome, reason, wall_s, rank, slot, host}
//   0 -> worker   shutdown  stop: forward a stop to running children, report, say bye
//   worker -> 0   bye       nothing of mine runs any more; I leave after shutdown
//   worker -> 0   heartbeat (empty) I am alive; sent by a thread of its own (heartbeat.h)
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "experiments/cell_status.h"

namespace attnsweep {

enum MessageTag : int {
  kTagRequest = 11,
  kTagAssign = 12,
  kTagResult = 13,
  kTagShutdown = 14,
  kTagBye = 15,
  kTagHeartbeat = 16
};

inline const char* tag_name(int tag) {
  switch (tag) {
    case kTagRequest: return "request";
    case kTagAssign: return "assign";
    case kTagResult: return "result";
    case kTagShutdown: return "shutdown";
    case kTagBye: return "bye";
    case kTagHeartbeat: return "heartbeat";
  }
  return "unknown";
}

struct Message {
  int source = -1, tag = -1;
  nlohmann::json payload;
};

// The bounds of the last waits of a run (flush()): rank 0 for its shutdowns to the
// workers, a worker for its goodbye and last results to rank 0. Both are delivered within
// milliseconds; a peer that takes nothing for this long is frozen or gone.
inline constexpr double kLastSendsToWorkersS = 30;
inline constexpr double kLastSendsToRank0S = 60;

// Every send of the sweep: non-blocking (MPI_Isend of a buffer the outbox keeps until the
// send completes), so that no rank waits on a peer that is frozen (SIGSTOP, an NFS hang,
// a link that drops packets): a blocking send to such a rank waits for ever once the
// message is too large to go eagerly or the socket buffers fill (docs/lost-ranks.md).
// progress() completes what it can without waiting; abandon() gives up on a lost rank's
// sends (their buffers live to the end of the process, as MPI may still read them).
// One thread per outbox.
class Outbox {
 public:
  Outbox();
  ~Outbox();  // frees (never waits for) what is still pending; flush() first to deliver it
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  // Queues `payload` as JSON text to `dest` (MPI_COMM_WORLD) and starts sending it.
  void post(int dest, int tag, const nlohmann::json& payload);
  // An empty message (a heartbeat), unless one with this tag to `dest` is still pending:
  // a frozen receiver gets no pile of them.
  void post_empty_once(int dest, int tag);
  // Tests every pending send, without waiting; returns how many are still pending.
  size_t progress();
  size_t pending() const;
  // A rank declared lost: its pending sends are released, never waited on, and any later
  // post to it is sent the same way (fire and forget).
  void abandon(int dest);
  // progress() until nothing is pending or `timeout_s` has passed (polling, 1 ms apart);
  // true when everything was delivered.
  bool flush(double timeout_s);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// Every receive of the sweep: non-blocking too. A probed message (MPI_Iprobe) is received
// with MPI_Irecv and handed out once complete, in order per source, so that a sender
// frozen half-way through a message holds up no one else's. One thread receives.
class Inbox {
 public:
  Inbox();
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;
  // The next complete message from `source` (MPI_ANY_SOURCE for any), without waiting.
  std::optional<Message> poll(int source);

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One attempt of one cell.
struct CellAttempt {
  size_t index = 0;
  std::string id;
  int attempt = 1;
};

// assign's payload: an attempt of a cell, and of the other cells of its group if any
// (experiments/registry.h TaskFusion: one child process trains them as one).
struct Assignment {
  size_t index = 0;
  std::string id;
  int attempt = 1;
  double timeout_s = 0;  // per cell: a group's child may run timeout_s times its cells
  int slots = 1;         // devices the cell trains on, data-parallel (its `devices` key)
  std::vector<CellAttempt> also;
  // Every cell of the attempt, the lead first.
  std::vector<CellAttempt> cells() const {
    std::vector<CellAttempt> c{{index, id, attempt}};
    c.insert(c.end(), also.begin(), also.end());
    return c;
  }
};

// on_slots: the slots rank 0 chose for it among the rank's offers.
nlohmann::json to_json(const Assignment& a, const std::vector<int>& on_slots);
Assignment assignment_from_json(const nlohmann::json& j);

// result's payload: how an attempt ended.
struct AttemptResult {
  size_t index = 0;
  std::string id;
  int attempt = 1;
  CellStatus outcome = CellStatus::failed;
  std::string reason;
  double wall_s = 0;
  int rank = 0, slot = 0;
  std::string host;
  bool retry = true;  // false: another attempt would fail the same way (train's exit 65)
};

nlohmann::json to_json(const AttemptResult& r);
// Anything but complete, diverged or interrupted reads as failed.
AttemptResult result_from_json(const nlohmann::json& j);

}  // namespace attnsweep
