// The scheduling policy alone, with no processes and no MPI (libEnsemble's lesson).
#include <gtest/gtest.h>

#include "coordinator/scheduler.h"

using namespace attnsweep;

TEST(Scheduler, LongestEstimatedCostFirstTiesInGridOrder) {
  Scheduler s({1.0, 5.0, 3.0, 5.0}, SchedulerConfig{});
  EXPECT_EQ(*s.next(0), 1u);
  EXPECT_EQ(*s.next(0), 3u);
  EXPECT_EQ(*s.next(0), 2u);
  EXPECT_EQ(*s.next(0), 0u);
  EXPECT_FALSE(s.next(0).has_value());
  EXPECT_EQ(s.count(CellStatus::running), 4u);
}

TEST(Scheduler, ResumedCellsAreNeverHandedOut) {
  Scheduler s({1.0, 2.0, 3.0}, SchedulerConfig{});
  s.mark_finished(2, CellStatus::complete);
  s.mark_finished(0, CellStatus::diverged);
  EXPECT_EQ(*s.next(0), 1u);
  EXPECT_FALSE(s.next(0).has_value());
  s.on_result(1, CellStatus::complete, 0);
  EXPECT_TRUE(s.all_terminal());
}

TEST(Scheduler, FailedAttemptsRetryWithDoublingBackoffThenFail) {
  Scheduler s({1.0, 2.0}, SchedulerConfig{2, 1.0, 60.0});
  ASSERT_EQ(*s.next(0), 1u);
  Decision d = s.on_result(1, CellStatus::failed, 10.0, "killed by signal 11");
  EXPECT_EQ(d.kind, Decision::retry);
  EXPECT_DOUBLE_EQ(d.retry_at, 11.0);  // 1 s after the first failure
  EXPECT_EQ(*s.next(10.5), 0u);        // the other cell goes first while 1 backs off
  EXPECT_FALSE(s.next(10.9).has_value());
  ASSERT_EQ(*s.next(11.0), 1u);
  EXPECT_EQ(s.attempts(1), 2);
  d = s.on_result(1, CellStatus::failed, 20.0, "again");
  EXPECT_EQ(d.kind, Decision::retry);
  EXPECT_DOUBLE_EQ(d.retry_at, 22.0);  // doubled
  EXPECT_DOUBLE_EQ(s.next_ready_time(), 22.0);
  ASSERT_EQ(*s.next(22.0), 1u);
  d = s.on_result(1, CellStatus::failed, 30.0, "third");
  EXPECT_EQ(d.kind, Decision::failed);  // 1 + 2 retries used
  EXPECT_EQ(s.state(1), CellStatus::failed);
  EXPECT_EQ(s.last_error(1), "third");
}

TEST(Scheduler, InterruptedAttemptsAreGivenBack) {
  Scheduler s({1.0}, SchedulerConfig{0, 1.0, 60.0});
  ASSERT_EQ(*s.next(0), 0u);
  EXPECT_EQ(s.on_result(0, CellStatus::interrupted, 1.0).kind, Decision::requeued);
  EXPECT_EQ(s.attempts(0), 0);  // a preemption is not the cell's fault: retries untouched
  ASSERT_EQ(*s.next(1.0), 0u);  // ready at once
  EXPECT_EQ(s.on_result(0, CellStatus::diverged, 2.0).kind, Decision::done);
  EXPECT_EQ(s.count(CellStatus::diverged), 1u);
  EXPECT_TRUE(s.all_terminal());
}

// A failure another attempt would repeat (train's exit 65: a malformed metrics line) fails
// the cell at once, its retries unused.
TEST(Scheduler, FailuresThatWouldRepeatAreNotRetried) {
  Scheduler s({1.0}, SchedulerConfig{2, 1.0, 60.0});
  ASSERT_EQ(*s.next(0), 0u);
  const Decision d = s.on_result(0, CellStatus::failed, 10.0, "metrics.jsonl:2: not a JSON line", false);
  EXPECT_EQ(d.kind, Decision::failed);
  EXPECT_EQ(s.state(0), CellStatus::failed);
  EXPECT_EQ(s.attempts(0), 1);
  EXPECT_TRUE(s.all_terminal());
}

TEST(Scheduler, ZeroRetriesFailAtOnce) {
  Scheduler s({1.0}, SchedulerConfig{0, 1.0, 60.0});
  ASSERT_TRUE(s.next(0).has_value());
  EXPECT_EQ(s.on_result(0, CellStatus::failed, 0.0, "x").kind, Decision::failed);
}

TEST(Scheduler, MultiSlotCellsGoWhereTheyFit) {
  // Cell 0 needs 2 slots and is the longest; cell 1 and 2 need one each.
  Scheduler s({9.0, 5.0, 1.0}, SchedulerConfig{}, {2, 1, 1});
  EXPECT_EQ(*s.next(0, 1), 1u);  // one free slot: the 2-slot cell does not fit, the next longest does
  EXPECT_EQ(*s.next(0, 2), 0u);  // two free slots: the 2-slot cell, longest first
  EXPECT_EQ(s.slots(0), 2);
  EXPECT_EQ(*s.next(0, 1), 2u);
  EXPECT_FALSE(s.next(0, 5).has_value());
}
