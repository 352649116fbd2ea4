// Training batches made one step ahead on a host thread (worker/training/cell_loop.h, on CUDA):
// while the GPU runs step t, the host makes batch t + 1 instead of waiting. The batch of
// a cursor is the same wherever it is made (the sampler and the task's fill are functions
// of the cursor), and the data source is never called from two threads at once: take()
// and wait() return only when the thread is idle.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace attnsweep {

struct HostBatch {
  std::vector<float> x, y_value;
  std::vector<int32_t> y_class;
  std::vector<int64_t> idx;
};

class BatchPrefetcher {
 public:
  // make(cursor, batch) fills batch (sized like `shape`) with the batch at sample cursor.
  using Make = std::function<void(int64_t cursor, HostBatch& batch)>;
  BatchPrefetcher(Make make, const HostBatch& shape) : make_(std::move(make)), slots_{shape, shape} {
    thread_ = std::thread([this] { run(); });
  }
  ~BatchPrefetcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The batch at `cursor` (the one made ahead if it is that one, else made here), then
  // starts making the batch at `next` in the other slot (none when next < 0: after the
  // last step). Valid until the next take(). Rethrows what the thread's make threw.
  HostBatch& take(int64_t cursor, int64_t next) {
    wait();
    const int cur = ready_cursor_ == cursor ? ready_slot_ : 1 - ready_slot_;
    if (ready_cursor_ != cursor) make_(cursor, slots_[cur]);
    if (next < 0) return slots_[cur];
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_cursor_ = next;
      job_slot_ = 1 - cur;
      busy_ = true;
    }
    cv_.notify_all();
    return slots_[cur];
  }

  // Until the batch being made is done (before anything else calls the data source).
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !busy_; });
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return busy_ || quit_; });
      if (quit_) return;
      const int64_t cursor = job_cursor_;
      const int slot = job_slot_;
      lock.unlock();
      std::exception_ptr err;
      try {
        make_(cursor, slots_[slot]);
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      if (err) {
        error_ = err;
        ready_cursor_ = -1;
      } else {
        ready_cursor_ = cursor;
        ready_slot_ = slot;
      }
      busy_ = false;
      cv_.notify_all();
    }
  }

  Make make_;
  HostBatch slots_[2];
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false, quit_ = false;
  int64_t job_cursor_ = -1, ready_cursor_ = -1;
  int job_slot_ = 0, ready_slot_ = 0;
  std::exception_ptr error_;
};

}  // namespace attnsweep
