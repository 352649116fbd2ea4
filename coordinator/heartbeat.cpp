#include "coordinator/heartbeat.h"

#include <mpi.h>

#include <chrono>

#include "coordinator/messages.h"

namespace attnsweep {

Heartbeat::Heartbeat(double interval_s) : interval_s_(interval_s), thread_([this] { loop(); }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Heartbeat::loop() {
  const auto interval = std::chrono::duration<double>(interval_s_);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    // Zero bytes: always sent eagerly, never waits for rank 0 to receive it.
    MPI_Send(nullptr, 0, MPI_CHAR, 0, kTagHeartbeat, MPI_COMM_WORLD);
    lock.lock();
    cv_.wait_for(lock, interval, [this] { return stop_; });
  }
}

}  // namespace attnsweep
