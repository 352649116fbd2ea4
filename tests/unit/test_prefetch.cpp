// worker/training/prefetch.h: the batch a cursor gets is the one made in line, whether it was made
// ahead or (after a jump of the cursor) in the call; the data source is never called from
// two threads at once; an error in the thread reaches the caller.
#include "worker/training/prefetch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

namespace attnsweep {
namespace {

// batch(cursor): x[j] = cursor * 10 + j, idx[j] = cursor + j; slow enough that a take
// right after another finds the thread still busy.
void make(int64_t cursor, HostBatch& b, std::atomic<int>& active, std::atomic<int>& worst) {
  const int now = ++active;
  worst = std::max(worst.load(), now);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (size_t j = 0; j < b.x.size(); ++j) b.x[j] = static_cast<float>(cursor * 10 + static_cast<int64_t>(j));
  for (size_t j = 0; j < b.idx.size(); ++j) b.idx[j] = cursor + static_cast<int64_t>(j);
  --active;
}

HostBatch shape() {
  HostBatch b;
  b.x.resize(4);
  b.idx.resize(4);
  return b;
}

TEST(BatchPrefetcher, EveryCursorGetsItsBatchInOrderOrAfterAJump) {
  std::atomic<int> active{0}, worst{0}, calls{0};
  BatchPrefetcher p(
      [&](int64_t c, HostBatch& b) {
        ++calls;
        make(c, b, active, worst);
      },
      shape());
  // In order: 0, 4, 8, ... (each made ahead by the previous take), then a jump to 100
  // (made in the call), then on from there.
  std::vector<int64_t> cursors;
  for (int64_t c = 0; c < 40; c += 4) cursors.push_back(c);
  cursors.push_back(100);
  cursors.push_back(104);
  for (size_t i = 0; i < cursors.size(); ++i) {
    const int64_t c = cursors[i];
    HostBatch& b = p.take(c, c + 4);
    for (size_t j = 0; j < 4; ++j) {
      EXPECT_EQ(b.x[j], static_cast<float>(c * 10 + static_cast<int64_t>(j))) << "cursor " << c;
      EXPECT_EQ(b.idx[j], c + static_cast<int64_t>(j)) << "cursor " << c;
    }
    if (i == 4) {
      p.wait();  // an evaluation between steps: the thread is idle after this
      EXPECT_EQ(active.load(), 0);
    }
  }
  p.wait();
  EXPECT_EQ(worst.load(), 1) << "the data source ran on two threads at once";
  // Made in line: 0 and 100 (the jump); ahead: 4 .. 40 (40 for nothing), 104, 108.
  EXPECT_EQ(calls.load(), 14);
}

TEST(BatchPrefetcher, AnErrorInTheThreadReachesTheCaller) {
  BatchPrefetcher p(
      [](int64_t c, HostBatch&) {
        if (c == 8) throw std::runtime_error("sample 8 is unreadable");
      },
      shape());
  p.take(0, 8);  // 8 is made ahead, and fails there
  try {
    p.take(8, 16);
    ADD_FAILURE() << "the error was lost";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "sample 8 is unreadable");
  }
}

}  // namespace
}  // namespace attnsweep
