// Cells trained as one (worker/training/cell_group.h, worker/training/cell_group_loop.h), in process: a group
// of paper B cells (2 activations x 2 initialisations x 2 data seeds, one of them with a
// step size that diverges) trained through CellGroup, each member on its own thread as a
// child runs them, against each cell trained alone: every output bit for bit, the diverged
// cell diverged and the others complete. On the CPU, and on a CUDA device (op by op, and
// with device-made batches; SKIPPED without a GPU). The coordinator's side and the child's
// files, kills and resumes: tests/integration/fused_groups.sh.
#include <gtest/gtest.h>

#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "experiments/icl_regression.h"
#include "kernels/device.h"
#include "tests/unit/trainer_test_util.h"
#include "worker/training/cell_group.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {

std::vector<json> group_cells() {
  std::vector<json> cells;
  for (const char* act : {"softmax", "sigmoid"})
    for (int init : {1, 2})
      for (int seed : {3, 4}) {
        json c = icl_cell(act);
        c.update(json{{"init_seed", init}, {"seed", seed}, {"steps", 40}, {"log_every", 7}, {"eval_every", 20}});
        cells.push_back(c);
      }
  cells[5]["lr"] = 1e6;  // diverges within a few steps
  return cells;
}

TaskContext context(const std::string& device) {
  TaskContext ctx;
  ctx.device = device;
  return ctx;
}

std::vector<TaskOutput> alone(const std::vector<json>& cells, const std::string& device) {
  std::vector<TaskOutput> out;
  TaskContext ctx = context(device);
  ctx.train = train_cell;
  for (const json& c : cells) out.push_back(run_icl_regression(c, ctx));
  return out;
}

// As `attnsweep train C1.json C2.json ...` runs them (coordinator/train_command.cpp).
std::vector<TaskOutput> grouped(const std::vector<json>& cells, const std::string& device) {
  const size_t K = cells.size();
  CellGroup group(K);
  std::vector<TaskOutput> out(K);
  std::vector<std::exception_ptr> errors(K);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < K; ++i)
    threads.emplace_back([&, i] {
      TaskContext ctx = context(device);
      ctx.train = [&group, i](const json& c, const TaskContext& cx, const TrainingData& d) {
        return group.train(i, c, cx, d);
      };
      try {
        out[i] = run_icl_regression(cells[i], ctx);
      } catch (...) {
        errors[i] = std::current_exception();
      }
      group.leave(i);
    });
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return out;
}

void expect_group_as_alone(const std::string& device) {
  const std::vector<json> cells = group_cells();
  const std::vector<TaskOutput> a = alone(cells, device), g = grouped(cells, device);
  for (size_t i = 0; i < cells.size(); ++i) {
    SCOPED_TRACE("cell " + std::to_string(i));
    EXPECT_EQ(a[i].status, i == 5 ? CellStatus::diverged : CellStatus::complete);
    expect_identical(a[i], g[i]);
  }
}

TEST(CellGroup, CellsTrainedAsOneGetWhatEachGetsAlone) {
  expect_group_as_alone("cpu");
}

TEST(CellGroupCuda, CellsTrainedAsOneGetWhatEachGetsAlone) {
  if (cuda_device_count() < 1) GTEST_SKIP() << "needs a CUDA device, none visible";
  expect_group_as_alone("cuda:0");
  const EnvGuard guard("ATTNSWEEP_CUDA_DEVICE_BATCHES");
  ::setenv("ATTNSWEEP_CUDA_DEVICE_BATCHES", "1", 1);
  SCOPED_TRACE("device-made batches");
  expect_group_as_alone("cuda:0");
}

// A group names one device: cells of one group on two are refused, each with the reason.
TEST(CellGroup, CellsOnTwoDevicesAreRefused) {
  std::vector<json> cells = group_cells();
  cells.resize(2);
  CellGroup group(2);
  std::vector<std::string> why(2);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      TaskContext ctx = context(i == 0 ? "cpu" : "cuda:0");
      ctx.train = [&group, i](const json& c, const TaskContext& cx, const TrainingData& d) {
        return group.train(i, c, cx, d);
      };
      try {
        run_icl_regression(cells[i], ctx);
      } catch (const std::exception& e) {
        why[i] = e.what();
      }
      group.leave(i);
    });
  for (std::thread& t : threads) t.join();
  for (const std::string& w : why) EXPECT_NE(w.find("cells of a group train on one device"), std::string::npos) << w;
}

}  // namespace
}  // namespace attnsweep
