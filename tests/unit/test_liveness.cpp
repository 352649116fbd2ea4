// The liveness policy behind the heartbeats (coordinator/liveness.h), with no MPI.
#include <gtest/gtest.h>

#include <cmath>

#include "coordinator/liveness.h"

using namespace attnsweep;

TEST(Liveness, SilentRankIsLostAfterTheTimeoutWithItsCells) {
  Liveness live(4, 10.0, 0.0);
  live.assigned(2, 7, 1);
  live.assigned(2, 9, 2);
  live.assigned(1, 3, 1);
  for (double t = 1; t <= 10; t += 1) {
    live.heard(1, t);
    live.heard(3, t);
  }
  EXPECT_TRUE(live.check(10.0).empty());  // exactly the timeout: not yet
  live.heard(1, 10.5);
  live.heard(3, 10.5);
  const auto lost = live.check(10.5);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].rank, 2);
  EXPECT_DOUBLE_EQ(lost[0].silent_s, 10.5);
  EXPECT_EQ(lost[0].cells, (std::vector<size_t>{7, 9}));
  EXPECT_TRUE(live.lost(2));
  EXPECT_FALSE(live.lost(1));
  EXPECT_TRUE(live.any_lost());
  EXPECT_EQ(live.in_flight(2), 0u);
  EXPECT_TRUE(live.check(30.0).size() == 2);  // ranks 1 and 3 silent since 10.5
  EXPECT_TRUE(live.check(40.0).empty());      // a lost rank is reported once
}

TEST(Liveness, ALateResultFromALostRankIsNeverTaken) {
  Liveness live(3, 5.0, 0.0);
  live.assigned(1, 4, 1);
  live.heard(2, 6.0);
  ASSERT_EQ(live.check(6.0).size(), 1u);  // rank 1 lost holding cell 4
  // The cell is reassigned to rank 2 (attempt 1 again: a lost rank's attempt is given back).
  live.assigned(2, 4, 1);
  EXPECT_FALSE(live.heard(1, 7.0));         // it woke up (SIGCONT): still lost
  EXPECT_FALSE(live.take_result(1, 4, 1));  // its late result is ignored
  EXPECT_TRUE(live.take_result(2, 4, 1));   // the reassigned attempt counts, once
  EXPECT_FALSE(live.take_result(2, 4, 1));  // a duplicate does not
}

TEST(Liveness, OnlyTheAttemptARankHoldsIsTaken) {
  Liveness live(2, 5.0, 0.0);
  live.assigned(1, 0, 2);
  EXPECT_FALSE(live.take_result(1, 0, 1));  // an older attempt
  EXPECT_FALSE(live.take_result(1, 5, 2));  // a cell it was never given
  EXPECT_TRUE(live.take_result(1, 0, 2));
  EXPECT_EQ(live.in_flight(1), 0u);
}

TEST(Liveness, RetiredRanksAndRankZeroAreNotWatched) {
  Liveness live(3, 5.0, 0.0);
  live.retire(1);  // said bye: no more heartbeats, and that is fine
  live.heard(2, 100.0);
  EXPECT_TRUE(live.check(100.0).empty());
  EXPECT_DOUBLE_EQ(live.next_deadline(), 105.0);
  live.retire(2);
  EXPECT_TRUE(std::isinf(live.next_deadline()));
  EXPECT_FALSE(live.any_lost());
  Liveness alone(1, 5.0, 0.0);  // one process: nobody to watch
  EXPECT_TRUE(alone.check(1e9).empty());
}

TEST(Liveness, HeartbeatIntervalLeavesEightBeatsPerTimeout) {
  EXPECT_DOUBLE_EQ(heartbeat_interval_s(180), 5.0);  // the default: capped
  EXPECT_DOUBLE_EQ(heartbeat_interval_s(8), 1.0);
  EXPECT_DOUBLE_EQ(heartbeat_interval_s(1), 0.125);
}
