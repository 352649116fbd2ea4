// A rank's heartbeat: a thread of its own that sends rank 0 an empty kTagHeartbeat
// message every interval, so that a slow child, a long HDF5 read or a hung file system
// in the rank's main loop does not silence it. Only a rank whose whole process stops
// (SIGSTOP, a frozen node) or dies falls silent. Needs MPI_THREAD_MULTIPLE; the main
// loop keeps sending its own messages meanwhile. Never waits on rank 0 (messages.h Outbox).
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace attnsweep {

class Heartbeat {
 public:
  // Starts the thread (MPI must be initialised with MPI_THREAD_MULTIPLE).
  explicit Heartbeat(double interval_s);
  // Stops and joins it; call before MPI_Finalize.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

 private:
  void loop();
  double interval_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace attnsweep
