#include "coordinator/heartbeat.h"

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
  // Its own outbox (one thread each): a beat is not sent while the last one is pending, so
  // a frozen rank 0 gets no pile of them, and the thread never waits on it.
  Outbox out;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    out.post_empty_once(0, kTagHeartbeat);
    lock.lock();
    cv_.wait_for(lock, interval, [this] { return stop_; });
  }
}

}  // namespace attnsweep
