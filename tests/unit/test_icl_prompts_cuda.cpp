// icl_regression's prompts made on a CUDA device (experiments/icl_prompts_cuda.h) against
// the CPU's, bit for bit: the normals alone, whole prompts for every d up to the largest and
// lengths around the launch's tiles, and whole cells trained on device-made batches
// (ATTNSWEEP_CUDA_DEVICE_BATCHES=1), op by op and in step graphs, against the same cells on
// host-made ones: the same batches, so the same trajectory bits. Every test needs a GPU and
// reports SKIPPED without one.
#ifdef ATTNSWEEP_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "experiments/icl_prompts_cuda.h"
#include "experiments/icl_regression.h"
#include "experiments/normals.h"
#include "kernels/device.h"
#include "tests/unit/trainer_test_util.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {

#define SKIP_WITHOUT_GPU \
  if (cuda_device_count() < 1) GTEST_SKIP() << "needs a CUDA device, none visible"

void ok(cudaError_t e) {
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
}

template <class T>
struct DeviceVec {
  T* p = nullptr;
  explicit DeviceVec(size_t n) { ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T))); }
  ~DeviceVec() { cudaFree(p); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(IclPromptsCuda, NormalsMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU;
  const std::pair<uint64_t, uint64_t> key_streams[] = {{0, 0}, {0x243F6A8885A308D3ull, 17}, {~0ull, ~0ull}};
  for (const auto& [key, stream] : key_streams)
    for (int64_t n : {1, 3, 4, 5, 127, 128, 129, 4099, 1 << 20}) {
      std::vector<float> want(static_cast<size_t>(n)), got(want.size());
      philox_normals(key, stream, want.data(), n);
      DeviceVec<float> d(want.size());
      philox_normals_cuda(key, stream, d.p, n, nullptr);
      ok(cudaMemcpy(got.data(), d.p, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_TRUE(same_bits(got, want)) << "key " << key << " stream " << stream << " n " << n;
    }
}

TEST(IclPromptsCuda, PromptsMatchTheCpuBitForBit) {
  SKIP_WITHOUT_GPU;
  std::vector<float> scratch;
  for (int64_t d : {1, 5, 13, kIclMaxD})
    for (int64_t L : {1, 10, 127, 128, 1000}) {
      const IclSetup s = make_icl_setup(d, L, 0.5, 0.1, 100 + d);
      const int64_t T = L + 1, C = d + 1;
      const std::vector<int64_t> idx = {0, 1, 77, 1 << 20, 16777215};
      const int64_t n = static_cast<int64_t>(idx.size());
      std::vector<float> want_x(static_cast<size_t>(n * T * C)), want_y(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i)
        icl_prompt_tokens(s, 0, idx[static_cast<size_t>(i)], want_x.data() + i * T * C, &want_y[static_cast<size_t>(i)],
                          nullptr, scratch);
      DeviceVec<int64_t> di(idx.size());
      DeviceVec<float> dx(want_x.size()), dy(want_y.size());
      ok(cudaMemcpy(di.p, idx.data(), idx.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
      icl_prompts_cuda(icl_prompts_cuda_args(s, 0), di.p, n, dx.p, dy.p, nullptr);
      std::vector<float> got_x(want_x.size()), got_y(want_y.size());
      ok(cudaMemcpy(got_x.data(), dx.p, got_x.size() * sizeof(float), cudaMemcpyDeviceToHost));
      ok(cudaMemcpy(got_y.data(), dy.p, got_y.size() * sizeof(float), cudaMemcpyDeviceToHost));
      EXPECT_TRUE(same_bits(got_x, want_x)) << "tokens: d " << d << " L " << L;
      EXPECT_TRUE(same_bits(got_y, want_y)) << "targets: d " << d << " L " << L;
    }
}

// The cell on CUDA with ATTNSWEEP_CUDA_DEVICE_BATCHES and ATTNSWEEP_CUDA_GRAPHS as given
// (unset: nullopt); host_train_fills counts the training-split batches the host made.
TaskOutput run_cuda_cell(const std::optional<std::string>& device_batches, const std::optional<std::string>& graphs,
                         int* host_train_fills) {
  const EnvGuard a("ATTNSWEEP_CUDA_DEVICE_BATCHES"), b("ATTNSWEEP_CUDA_GRAPHS");
  for (const auto& [name, value] :
       {std::pair{"ATTNSWEEP_CUDA_DEVICE_BATCHES", device_batches}, std::pair{"ATTNSWEEP_CUDA_GRAPHS", graphs}}) {
    if (value)
      ::setenv(name, value->c_str(), 1);
    else
      ::unsetenv(name);
  }
  json cell = icl_cell("softmax");
  cell.update(json{{"prompt_length", 200}, {"steps", 60}, {"batch", 32}, {"log_every", 7}, {"eval_every", 20}});
  TaskContext ctx;
  ctx.device = "cuda:0";
  *host_train_fills = 0;
  ctx.train = [host_train_fills](const json& c, const TaskContext& cx, const TrainingData& d) {
    TrainingData counted = d;
    counted.fill = [host_train_fills, fill = d.fill](int split, const int64_t* idx, int64_t count, float* x,
                                                     int32_t* yc, float* yv) {
      if (split == 0) ++*host_train_fills;
      fill(split, idx, count, x, yc, yv);
    };
    return train_cell(c, cx, counted);
  };
  return run_icl_regression(cell, ctx);
}

TEST(IclPromptsCuda, CellsOnDeviceBatchesTrainAsOnHostBatches) {
  SKIP_WITHOUT_GPU;
  for (const std::optional<std::string>& graphs : {std::optional<std::string>{}, std::optional<std::string>{"1"}}) {
    int host = 0, device = 0;
    const TaskOutput on_host = run_cuda_cell(std::nullopt, graphs, &host);
    const TaskOutput on_device = run_cuda_cell("1", graphs, &device);
    EXPECT_EQ(host, 60) << "the host made every training batch";
    EXPECT_EQ(device, 0) << "with device batches, the host made none";
    SCOPED_TRACE(graphs ? "step graphs" : "op by op");
    ASSERT_EQ(on_host.status, CellStatus::complete);
    expect_identical(on_host, on_device);
  }
}

}  // namespace
}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
