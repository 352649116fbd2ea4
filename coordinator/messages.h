// Every MPI message of the sweep, in one place. Payloads are JSON text: only control
// messages and one-line summaries cross MPI; results travel as files.
//
//   worker -> 0   request   one slot of mine is free
//   0 -> worker   assign    {index, id, attempt, timeout_s}
//   worker -> 0   result    {index, id, attempt, outcome, reason, wall_s, rank, slot, host}
//   0 -> worker   shutdown  stop: forward a stop to running children, report, say bye
//   worker -> 0   bye       nothing of mine runs any more; I leave after shutdown
//   worker -> 0   heartbeat (empty) I am alive; sent by a thread of its own (heartbeat.h)
#pragma once

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

}  // namespace attnsweep
