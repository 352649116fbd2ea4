// base/errors.h: the four kinds of failure, and what a cell's child makes of each (only a
// transient one is worth another attempt: worker/training/run_cell.cpp).
#include "base/errors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <new>
#include <stdexcept>

#include "trainer_test_util.h"
#include "worker/training/run_cell.h"

namespace attnsweep {
namespace {

TEST(Errors, EachKindSaysWhatItIs) {
  EXPECT_EQ(error_kind(InputError({"grid.json: steps: expected an integer >= 0"})), ErrorKind::input);
  EXPECT_EQ(error_kind(TransientError("cannot write x")), ErrorKind::transient);
  EXPECT_EQ(error_kind(DeterministicError("metrics line 3: not JSON")), ErrorKind::deterministic);
  EXPECT_EQ(error_kind(InternalError("qkv_w is not the read-out's")), ErrorKind::internal);
  EXPECT_STREQ(error_kind_name(ErrorKind::deterministic), "deterministic");
}

// What a library throws has no kind of its own: it is retried, as every failure was
// before there were kinds.
TEST(Errors, ALibrarysExceptionCountsAsTransient) {
  EXPECT_EQ(error_kind(std::runtime_error("H5Fopen failed")), ErrorKind::transient);
  EXPECT_EQ(error_kind(std::bad_alloc()), ErrorKind::transient);
  EXPECT_EQ(error_kind(std::filesystem::filesystem_error("rename", std::error_code())), ErrorKind::transient);
}

TEST(Errors, OnlyATransientFailureIsWorthRetrying) {
  EXPECT_TRUE(worth_retrying(ErrorKind::transient));
  for (ErrorKind k : {ErrorKind::input, ErrorKind::deterministic, ErrorKind::internal})
    EXPECT_FALSE(worth_retrying(k)) << error_kind_name(k);
}

TEST(Errors, AnInputErrorKeepsItsProblemsOneALine) {
  const InputError one({"a.json: x: one"});
  EXPECT_STREQ(one.what(), "a.json: x: one");
  const InputError two({"a.json: x: one", "a.json: y: two"});
  EXPECT_STREQ(two.what(), "a.json: x: one\na.json: y: two");
  EXPECT_EQ(two.problems.size(), 2u);
}

// `attnsweep train`'s exit status (run_cell): 1 (retried) for a transient failure, 65
// (not retried) for the other three kinds.
TEST(RunCellErrors, TheKindOfAFailureDecidesWhetherTheCellIsRetried) {
  struct Case {
    const char* what;
    std::function<void()> fail;
    int code;
  };
  const Case cases[] = {
      {"transient", [] { throw TransientError("disk full"); }, 1},
      {"library", [] { throw std::runtime_error("H5Dwrite failed"); }, 1},
      {"input", [] { throw InputError({"optimizer: expected adamw or sgd"}); }, kExitFailedNoRetry},
      {"deterministic", [] { throw DeterministicError("metrics line 3"); }, kExitFailedNoRetry},
      {"internal", [] { throw InternalError("a broken invariant"); }, kExitFailedNoRetry},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    RunCellOptions opt;
    opt.train = [&c](const json&, const TaskContext&, const TrainingData&) -> TaskOutput {
      c.fail();
      return {};
    };
    CellResult r;
    testing::internal::CaptureStderr();
    EXPECT_EQ(run_cell("c0", icl_cell("softmax"), opt, &r), c.code);
    EXPECT_NE(testing::internal::GetCapturedStderr().find("cell c0 failed"), std::string::npos);
  }
}

// The trainer's own check of a cell's config, through the real path: not retried.
TEST(RunCellErrors, ACellConfigTheTrainerRefusesIsNotRetried) {
  json cell = icl_cell("softmax");
  cell["optimizer"] = "adam";
  CellResult r;
  testing::internal::CaptureStderr();
  EXPECT_EQ(run_cell("c0", cell, RunCellOptions{}, &r), kExitFailedNoRetry);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("optimizer: expected adamw or sgd, got \"adam\""), std::string::npos) << err;
}

}  // namespace
}  // namespace attnsweep
