// Slot planning alone (coordinator/local_slots.h): which GPU each slot runs on with K cells
// per GPU, which free slots a cell of n devices takes, and whether K cells fit in a GPU's
// memory. No processes, no MPI.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "coordinator/grid.h"
#include "coordinator/local_slots.h"
#include "coordinator/run_plan.h"
#include "coordinator/scheduler.h"
#include "worker/model/gpu_memory.h"

using namespace attnsweep;

namespace {

// Every slot of a plan, as free slots.
std::vector<FreeSlot> all_free(const std::vector<int>& device_of) {
  std::vector<FreeSlot> f;
  for (size_t j = 0; j < device_of.size(); ++j) f.push_back({static_cast<int>(j), device_of[j]});
  return f;
}

void take(std::vector<FreeSlot>& free, const std::vector<int>& slots) {
  std::erase_if(free, [&](const FreeSlot& f) { return std::find(slots.begin(), slots.end(), f.slot) != slots.end(); });
}

}  // namespace

TEST(SlotPlan, GpusTimesCellsPerGpuSlotsRoundRobin) {
  for (int g : {1, 2, 3})
    for (int k : {1, 2, 4}) {
      const std::vector<int> d = slot_devices(g, k);
      ASSERT_EQ(d.size(), static_cast<size_t>(g * k)) << g << " GPUs, K " << k;
      std::vector<int> per(static_cast<size_t>(g), 0);
      for (size_t j = 0; j < d.size(); ++j) {
        EXPECT_EQ(d[j], static_cast<int>(j) % g) << "slot " << j << " of " << g << " GPUs, K " << k;
        ++per[static_cast<size_t>(d[j])];
      }
      for (int n : per) EXPECT_EQ(n, k);  // K slots on every GPU
    }
}

TEST(SlotPlan, OneDeviceCellsSpreadOverTheGpus) {
  // Filling every slot one cell at a time: the i-th cell lands on GPU i % G, so no GPU
  // gets a second cell before every GPU has one.
  for (int g : {1, 2, 3})
    for (int k : {1, 2, 4}) {
      std::vector<FreeSlot> free = all_free(slot_devices(g, k));
      for (int i = 0; i < g * k; ++i) {
        const std::vector<int> s = choose_slots(free, 1);
        ASSERT_EQ(s.size(), 1u);
        EXPECT_EQ(s[0] % g, i % g) << "cell " << i << " of " << g << " GPUs, K " << k;
        take(free, s);
      }
      EXPECT_TRUE(free.empty());
      EXPECT_TRUE(choose_slots(free, 1).empty());  // all busy: the next cell waits
    }
}

TEST(SlotPlan, MultiDeviceCellsGetDistinctGpus) {
  for (int g : {1, 2, 3})
    for (int k : {1, 2, 4}) {
      const std::vector<int> device_of = slot_devices(g, k);
      const std::vector<FreeSlot> free = all_free(device_of);
      EXPECT_EQ(distinct_devices(free), g);
      for (int need = 1; need <= g; ++need) {
        const std::vector<int> s = choose_slots(free, need);
        ASSERT_EQ(s.size(), static_cast<size_t>(need)) << g << " GPUs, K " << k << ", " << need << " devices";
        std::set<int> gpus;
        for (int j : s) gpus.insert(device_of[static_cast<size_t>(j)]);
        EXPECT_EQ(gpus.size(), static_cast<size_t>(need)) << "two slots of one GPU for one cell";
      }
      // More devices than GPUs: never two slots of one GPU, however many slots there are.
      EXPECT_TRUE(choose_slots(free, g + 1).empty()) << g << " GPUs, K " << k;
    }
}

TEST(SlotPlan, TwoDeviceCellWaitsWhileTheFreeSlotsAreOnOneGpu) {
  // 2 GPUs, K 2: slots 0 and 2 on GPU 0, 1 and 3 on GPU 1. Both of GPU 1's slots busy.
  std::vector<FreeSlot> free = all_free(slot_devices(2, 2));
  take(free, {1, 3});
  ASSERT_EQ(free.size(), 2u);            // two free slots ...
  EXPECT_EQ(distinct_devices(free), 1);  // ... on one GPU
  EXPECT_TRUE(choose_slots(free, 2).empty());
  // The scheduler sees 1 (the distinct GPUs), not 2: the 2-device cell (the longest)
  // waits and a 1-device cell goes.
  Scheduler s({9.0, 1.0}, SchedulerConfig{}, {2, 1});
  EXPECT_EQ(*s.next(0, distinct_devices(free)), 1u);
  take(free, choose_slots(free, 1));
  EXPECT_FALSE(s.next(0, distinct_devices(free)).has_value());
  // A slot of GPU 1 frees: now it goes, on one slot of each GPU.
  free.push_back({3, 1});
  ASSERT_EQ(*s.next(0, distinct_devices(free)), 0u);
  const std::vector<int> on = choose_slots(free, 2);
  ASSERT_EQ(on.size(), 2u);
  EXPECT_NE(on[0] % 2, on[1] % 2);
}

TEST(SlotPlan, LeastLoadedGpuFirstTiesToTheLowestSlot) {
  // GPU 0 has one free slot (4), GPU 1 two (3, 5), GPU 2 one (2).
  const std::vector<FreeSlot> free = {{4, 0}, {5, 1}, {3, 1}, {2, 2}};
  EXPECT_EQ(choose_slots(free, 1), std::vector<int>({3}));     // GPU 1: the most free, its lowest slot
  EXPECT_EQ(choose_slots(free, 2), std::vector<int>({3, 2}));  // then GPU 2 (slot 2 < slot 4)
  EXPECT_EQ(choose_slots(free, 3), std::vector<int>({3, 2, 4}));
  EXPECT_TRUE(choose_slots(free, 0).empty());
}

TEST(SlotPlan, CpuSlotsAreEachTheirOwnDevice) {
  const std::vector<FreeSlot> free = all_free(slot_devices(3, 1));
  EXPECT_EQ(distinct_devices(free), 3);
  EXPECT_EQ(choose_slots(free, 3), std::vector<int>({0, 1, 2}));
}

// GPU slots of K cells each on a GPU of `memory` bytes (0: unknown) named `source`.
RunPlanInputs gpu_slots(int k, int64_t memory, std::string source) {
  RunPlanInputs in;
  in.device = "cuda";
  in.cells_per_gpu = k;
  in.gpu_memory_bytes = memory;
  in.gpu_memory_source = std::move(source);
  in.check_gpu_fit = true;
  return in;
}

TEST(GpuFit, RefusesKCellsThatCannotShareOneGpuNamingTheCell) {
  // 64 cells per GPU of 1 GiB: the large image cell (N 784, dim 256, batch 128) does not fit.
  const Grid g = parse_grid(R"({"axes": {"task": ["image"], "prompt_length": [16, 784]},
                                "fixed": {"dim": 256, "heads": 4, "layers": 6, "batch": 128},
                                "resources": {"cells_per_gpu": 64, "gpu_memory_gib": 1}})",
                            "big.json");
  ASSERT_EQ(g.cells.size(), 2u);
  std::string source;
  const int64_t mem = planned_gpu_memory(g, &source);
  EXPECT_EQ(mem, int64_t{1} << 30);
  EXPECT_EQ(source, "resources.gpu_memory_gib");
  const RunPlan plan = make_run_plan(g, gpu_slots(g.resources.cells_per_gpu, mem, source));
  const GpuFit& f = plan.gpu_fit;
  EXPECT_EQ(plan.problem, f.problem);
  EXPECT_TRUE(f.checked);
  EXPECT_FALSE(f.fits);
  EXPECT_EQ(f.cell, 1u);  // N 784 is the larger
  for (const std::string& want :
       {"big.json: cell " + g.cells[1].id, std::string("task image"), std::string("prompt_length 784"),
        std::string("64 cells per GPU"), std::string("1.0 GiB of resources.gpu_memory_gib")})
    EXPECT_NE(f.problem.find(want), std::string::npos) << want << " not in: " << f.problem;
  EXPECT_NE(f.problem.find(format_gib(f.cell_bytes)), std::string::npos) << f.problem;
  // On a 141 GiB GPU the large cell fits alone and 4 times, not 64 times (K x 14 GiB);
  // with no memory known nothing is checked.
  EXPECT_TRUE(make_run_plan(g, gpu_slots(1, int64_t{141} << 30, "GPU 0")).gpu_fit.fits);
  EXPECT_TRUE(make_run_plan(g, gpu_slots(4, int64_t{141} << 30, "GPU 0")).gpu_fit.fits);
  const GpuFit k64 = make_run_plan(g, gpu_slots(64, int64_t{141} << 30, "GPU 0 (H200)")).gpu_fit;
  EXPECT_FALSE(k64.fits);
  EXPECT_NE(k64.problem.find("of GPU 0 (H200): lower cells_per_gpu (--cells-per-gpu) to at most " +
                             std::to_string((int64_t{141} << 30) / k64.cell_bytes)),
            std::string::npos)
      << k64.problem;
  const GpuFit unknown = make_run_plan(g, gpu_slots(64, 0, "")).gpu_fit;
  EXPECT_FALSE(unknown.checked);
  EXPECT_TRUE(unknown.fits);
  EXPECT_GT(unknown.cell_bytes, 0);
}

TEST(GpuFit, CellsThatUseNoGpuAreNotChecked) {
  const Grid g = parse_grid(R"({"axes": {"task": ["norm_probe"], "prompt_length": [16]},
                                "resources": {"cells_per_gpu": 64, "gpu_memory_gib": 0.001}})",
                            "probe.json");
  const GpuFit f = make_run_plan(g, gpu_slots(64, int64_t{1} << 20, "resources.gpu_memory_gib")).gpu_fit;
  EXPECT_FALSE(f.checked);
  EXPECT_TRUE(f.fits);
}

TEST(Grid, CellsPerGpuAndGpuMemoryAreResources) {
  Grid g = parse_grid(R"({"fixed": {"task": "synthetic"}})", "g.json");
  EXPECT_EQ(g.resources.cells_per_gpu, 1);
  EXPECT_EQ(g.resources.gpu_memory_gib, 0.0);
  g = parse_grid(R"({"fixed": {"task": "synthetic"}, "resources": {"cells_per_gpu": 8, "gpu_memory_gib": 80}})",
                 "g.json");
  EXPECT_EQ(g.resources.cells_per_gpu, 8);
  EXPECT_EQ(g.resources.gpu_memory_gib, 80.0);
  for (const char* bad :
       {R"("cells_per_gpu": 0)", R"("cells_per_gpu": 65)", R"("cells_per_gpu": 1.5)", R"("gpu_memory_gib": -1)"}) {
    try {
      parse_grid(std::string(R"({"fixed": {"task": "synthetic"}, "resources": {)") + bad + "}}", "g.json");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const InputError& e) {
      ASSERT_EQ(e.problems.size(), 1u);
      EXPECT_NE(e.problems[0].find("g.json: resources."), std::string::npos) << e.problems[0];
    }
  }
}

TEST(RunPlan, ACellOnMoreDevicesThanARankHasIsTheRunsProblem) {
  const Grid g =
      parse_grid(R"({"axes": {"task": ["image"], "devices": [1, 4]}, "fixed": {"prompt_length": 16}})", "dev.json");
  ASSERT_EQ(g.cells.size(), 2u);
  RunPlanInputs in;
  in.slots = in.devices = 2;
  const RunPlan two = make_run_plan(g, in);
  EXPECT_EQ(two.devices, std::vector<int>({1, 4}));
  EXPECT_NE(
      two.problem.find("dev.json: cell " + g.cells[1].id + " trains on devices = 4, more than the 2 worker slots"),
      std::string::npos)
      << two.problem;
  in.slots = in.devices = 4;
  EXPECT_EQ(make_run_plan(g, in).problem, "");
  in.devices = 0;  // unknown (plan): not checked
  EXPECT_EQ(make_run_plan(g, in).problem, "");
}
