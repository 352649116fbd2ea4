// worker/trainer: schedule, determinism, checkpoint/resume (bit-identical), divergence,
// and the image task's input errors. Tiny models on synthetic data (the PyTorch
// comparison of the model itself is tests/integration/trainer_torch.sh).
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <thread>

#include "base/cpu_env.h"
#include "coordinator/grid.h"
#include "coordinator/train_command.h"
#include "experiments/rng.h"
#include "experiments/task.h"
#include "kernels/device.h"
#include "results/h5.h"
#include "tests/unit/trainer_test_util.h"
#include "worker/training/run_cell.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"

namespace attnsweep {
namespace {
namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("attnsweep_trainer_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  fs::path dir_;
};

TEST(TrainerSchedule, WarmupThenCosine) {
  TrainConfig tc;
  tc.lr = 1.0;
  tc.steps = 110;
  tc.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(lr_at(tc, 0), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(tc, 9), 1.0);
  EXPECT_DOUBLE_EQ(lr_at(tc, 10), 1.0);
  EXPECT_NEAR(lr_at(tc, 60), 0.5, 1e-12);
  EXPECT_NEAR(lr_at(tc, 109), 0.5 * (1 + std::cos(M_PI * 99 / 100)), 1e-12);
}

TEST(TrainerGlobalNorm, MatchesFloat64Sum) {
  std::vector<float> g(100000);
  double want = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>(std::sin(0.1 * static_cast<double>(i)));
    want += static_cast<double>(g[i]) * g[i];
  }
  EXPECT_NEAR(global_norm(g.data(), static_cast<int64_t>(g.size())), std::sqrt(want), 1e-9 * std::sqrt(want));
}

TEST_F(TrainerTest, ShapesAndLearning) {
  TaskContext ctx;
  json c = tiny_config();
  c["steps"] = 120;
  c["batch"] = 16;
  c["lr"] = 1e-2;
  c["log_every"] = 6;
  c["eval_every"] = 20;
  const TaskOutput o = train_cell(c, ctx, synthetic_data());
  EXPECT_EQ(o.status, CellStatus::complete);
  EXPECT_EQ(series(o, "/train/step").shape, (std::vector<uint64_t>{21}));  // 0, 6, ..., 114 and 119
  EXPECT_EQ(series(o, "/norms/attn_fro").shape, (std::vector<uint64_t>{21, 2, 2}));
  EXPECT_EQ(series(o, "/eval/step").shape, (std::vector<uint64_t>{6}));  // 20..120
  EXPECT_TRUE(std::holds_alternative<std::vector<int64_t>>(series(o, "/train/step").data));
  EXPECT_TRUE(std::holds_alternative<std::vector<float>>(series(o, "/train/loss").data));
  const auto& eval_loss = std::get<std::vector<float>>(series(o, "/eval/loss").data);
  EXPECT_LT(eval_loss.back(), eval_loss.front());  // it learns something
  EXPECT_GT(o.final_metrics.at("test_accuracy"), 0.45) << "chance is 1/3";
  const auto& attn = std::get<std::vector<float>>(series(o, "/norms/attn_fro").data);
  for (float a : attn) {  // softmax: ||phi(S)||_F <= sqrt(N) per row block, and > 0
    EXPECT_GT(a, 0.0f);
    EXPECT_LE(a, 8.0f + 1e-4f);
  }
}

TEST_F(TrainerTest, TwoRunsAreBitIdentical) {
  TaskContext ctx;
  const TaskOutput a = train_cell(tiny_config(), ctx, synthetic_data());
  const TaskOutput b = train_cell(tiny_config(), ctx, synthetic_data());
  expect_identical(a, b);
  json c = tiny_config();
  c["seed"] = 6;  // another batch order, the same initial weights
  const TaskOutput d = train_cell(c, ctx, synthetic_data());
  EXPECT_NE(std::get<std::vector<float>>(series(a, "/train/loss").data)[1],
            std::get<std::vector<float>>(series(d, "/train/loss").data)[1]);
  EXPECT_EQ(std::get<std::vector<float>>(series(a, "/train/loss").data)[0] != 0.0f, true);
}

TEST_F(TrainerTest, StopCheckpointResumeIsBitIdentical) {
  for (const char* opt : {"adamw", "sgd"}) {
    json c = tiny_config();
    c["optimizer"] = opt;
    TaskContext plain;
    const TaskOutput whole = train_cell(c, plain, synthetic_data());

    std::atomic<int> stop{0};
    TaskContext ctx;
    ctx.stop = &stop;
    ctx.checkpoint_path = path(std::string("cell_") + opt + ".ckpt");
    // The fill of step 10 sets the flag: the trainer stops at the boundary of step 11.
    const TaskOutput first = train_cell(c, ctx, synthetic_data([&](int64_t k) {
                                          if (k == 10) stop = SIGUSR1;
                                        }));
    EXPECT_EQ(first.status, CellStatus::interrupted);
    ASSERT_TRUE(fs::exists(ctx.checkpoint_path));
    stop = 0;
    const TaskOutput resumed = train_cell(c, ctx, synthetic_data());
    expect_identical(whole, resumed);
  }
}

TEST_F(TrainerTest, PeriodicCheckpointResumesAndDamagedOneIsIgnored) {
  json c = tiny_config();
  c["checkpoint_every"] = 10;
  TaskContext ctx;
  ctx.checkpoint_path = path("cell.ckpt");
  const TaskOutput whole = train_cell(c, ctx, synthetic_data());
  ASSERT_TRUE(fs::exists(ctx.checkpoint_path));  // the last one, at step 20 (run_cell removes it)
  // Resume from step 20 of 24: the same result.
  expect_identical(whole, train_cell(c, ctx, synthetic_data()));
  // A truncated checkpoint (a crash mid-copy) counts as none: training restarts, same result.
  const auto size = fs::file_size(ctx.checkpoint_path);
  fs::resize_file(ctx.checkpoint_path, size - 3);
  expect_identical(whole, train_cell(c, ctx, synthetic_data()));
  // One flipped byte inside: the checksum rejects it.
  {
    std::fstream f(ctx.checkpoint_path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put('\x5a');
  }
  expect_identical(whole, train_cell(c, ctx, synthetic_data()));
  // A checkpoint of another config is not used either.
  json other = c;
  other["lr"] = 1e-2;
  TaskContext ctx2 = ctx;
  train_cell(other, ctx2, synthetic_data());  // leaves its own checkpoint at the same path
  expect_identical(whole, train_cell(c, ctx, synthetic_data()));
}

// A complete checkpoint of another format (an older or newer attnsweep) is refused with
// a message naming the file, not silently ignored; the file is left for the user.
TEST_F(TrainerTest, CheckpointOfAnotherFormatIsRefused) {
  json c = tiny_config();
  c["checkpoint_every"] = 10;
  TaskContext ctx;
  ctx.checkpoint_path = path("fmt.ckpt");
  train_cell(c, ctx, synthetic_data());
  std::string buf;
  {
    std::ifstream f(ctx.checkpoint_path, std::ios::binary);
    buf.assign(std::istreambuf_iterator<char>(f), {});
  }
  ASSERT_GT(buf.size(), 32u);
  ASSERT_EQ(buf.substr(0, 8), "ATSWCKPT");
  // Re-seals a body (everything before the checksum) as the writer does: FNV-1a 64, end marker.
  auto seal = [](std::string body) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : body) h = (h ^ ch) * 0x100000001b3ull;
    body.append(reinterpret_cast<const char*>(&h), sizeof h);
    return body + "ATSWEND!";
  };
  const std::string body = buf.substr(0, buf.size() - 16);
  std::string newer = body;
  const uint32_t three = 3;
  std::memcpy(&newer[8], &three, sizeof three);
  const std::string format1 = "ATSWCKP1" + body.substr(12);  // format 1: no version field
  for (const auto& [what, bytes] : {std::pair{"3", seal(newer)}, std::pair{"1", seal(format1)}}) {
    {
      std::ofstream f(ctx.checkpoint_path, std::ios::binary | std::ios::trunc);
      f << bytes;
    }
    try {
      train_cell(c, ctx, synthetic_data());
      ADD_FAILURE() << "a checkpoint of format " << what << " was not refused";
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(ctx.checkpoint_path), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("format ") + what), std::string::npos) << msg;
    }
    EXPECT_EQ(fs::file_size(ctx.checkpoint_path), bytes.size()) << "the refused checkpoint is left as it was";
  }
}

// Data parallelism: k = 2 replicas on the same global batch follow k = 1 for 20 AdamW
// steps. Not bitwise: each replica's backward sums its 8 rows in float32 and the
// all-reduce adds the two halves in float64, where k = 1 sums all 16 rows in one
// float32 pass, so gradient entries differ by a few float32 ulps (~1e-7 relative); the
// forward of a shard is row-wise and equal. AdamW's m / sqrt(v) keeps these errors
// relative, so over 20 steps they stay ~1e-7: we allow 1e-5 relative on the loss and
// 1e-5 absolute on parameters of size <= ~1 (100x what is seen), far below what a wrong
// shard, a missing 1/k or a skipped broadcast gives (> 1e-3 after one update). The one
// exception, the key bias, is explained below.
TEST_F(TrainerTest, DataParallelTwoDevicesMatchOne) {
  const TrainingData data = synthetic_data();
  TrainConfig tc;
  tc.steps = 20;
  tc.batch = 16;
  tc.warmup_steps = 4;
  tc.lr = 3e-3;
  tc.seed = 5;
  tc.init_seed = 1;
  tc.optimizer = "adamw";
  json c = tiny_config();
  const ModelConfig mc = model_config_of(c, data);
  // trace: loss, grad_norm of each step in turn.
  auto run = [&](int64_t devices, std::vector<double>* trace, std::vector<double>* attn) {
    TrainConfig t = tc;
    t.devices = devices;
    auto tr = std::make_unique<Trainer>(mc, t);
    const int64_t B = t.batch;
    std::vector<float> x(static_cast<size_t>(B * data.tokens * data.in_dim)), yv(static_cast<size_t>(B));
    std::vector<int32_t> yc(static_cast<size_t>(B));
    std::vector<int64_t> idx(static_cast<size_t>(B));
    for (int64_t s = 0; s < t.steps; ++s) {
      for (int64_t j = 0; j < B; ++j) idx[static_cast<size_t>(j)] = (s * B + j * 7) % data.n_train;
      data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
      const Trainer::StepResult r = tr->step(x.data(), yc.data(), yv.data(), B, s, s == 0);
      EXPECT_TRUE(r.finite);
      trace->push_back(r.fwd.loss);
      trace->push_back(r.grad_norm);  // catches a missing 1 / k
      if (s == 0) *attn = r.fwd.attn_fro;
    }
    return tr;
  };
  std::vector<double> l1, l2, a1, a2;
  auto one = run(1, &l1, &a1);
  auto two = run(2, &l2, &a2);
  ASSERT_EQ(two->devices(), 2);
  // seen: <= 3e-8 relative
  for (size_t s = 0; s < l1.size(); ++s) EXPECT_NEAR(l2[s], l1[s], 1e-5 * std::fabs(l1[s])) << "step " << s / 2;
  ASSERT_EQ(a1.size(), a2.size());
  for (size_t i = 0; i < a1.size(); ++i) EXPECT_NEAR(a2[i], a1[i], 1e-5 * a1[i]);  // the mean over the batch
  const int64_t n = one->model().num_params();
  // The key bias (rows [C, 2C) of each layer's qkv_b) has gradient 0 in exact arithmetic
  // under softmax (it adds q.b_k to a whole score row), so its float gradient is
  // rounding noise that AdamW normalises into steps of ~lr with either sign: it differs
  // between any two summation orders by up to ~lr per step, without changing the loss.
  std::vector<char> key_bias(static_cast<size_t>(n), 0);
  for (const auto& ti : one->model().tensors())
    if (ti.name == "qkv_b")
      for (int64_t l = 0; l < mc.layers; ++l)
        for (int64_t i = mc.dim; i < 2 * mc.dim; ++i) key_bias[static_cast<size_t>(ti.offset + l * 3 * mc.dim + i)] = 1;
  double max_diff = 0, max_kb_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::fabs(static_cast<double>(one->model().params()[i]) - two->model().params()[i]);
    double& m = key_bias[static_cast<size_t>(i)] ? max_kb_diff : max_diff;
    m = std::max(m, d);
  }
  EXPECT_LT(max_diff, 1e-5);  // seen: ~1e-7 (a few ulps of parameters of size <= 1)
  EXPECT_LT(max_kb_diff, static_cast<double>(tc.steps) * tc.lr);
  EXPECT_GT(l1.front() - l1[l1.size() - 2], 1e-2) << "the runs should move, or the comparison says nothing";
  // The broadcast: replica 1 holds exactly replica 0's parameters after the last step.
  EXPECT_EQ(std::memcmp(two->replica(0).params(), two->replica(1).params(), static_cast<size_t>(n) * sizeof(float)), 0);
}

TEST_F(TrainerTest, DataParallelIsDeterministic) {
  json c = tiny_config();
  c["devices"] = 2;
  c["steps"] = 12;
  TaskContext ctx;
  const TaskOutput a = train_cell(c, ctx, synthetic_data());
  const TaskOutput b = train_cell(c, ctx, synthetic_data());
  EXPECT_EQ(a.status, CellStatus::complete);
  expect_identical(a, b);
  // Stop at step 6, resume from the checkpoint (replica 0's state, broadcast on load).
  std::atomic<int> stop{0};
  TaskContext ck;
  ck.stop = &stop;
  ck.checkpoint_path = path("dp.ckpt");
  EXPECT_EQ(train_cell(c, ck, synthetic_data([&](int64_t f) {
                         if (f == 5) stop = SIGUSR1;
                       }))
                .status,
            CellStatus::interrupted);
  stop = 0;
  expect_identical(a, train_cell(c, ck, synthetic_data()));
}

TEST(TrainerDataParallel, BatchNotDivisibleByDevicesIsAValidationError) {
  const json ok = effective_config(json{{"task", "image"}, {"prompt_length", 16}, {"batch", 12}, {"devices", 4}}, "c");
  EXPECT_EQ(ok.at("devices"), 4);
  EXPECT_EQ(effective_config(json{{"task", "image"}, {"prompt_length", 16}}, "c").at("devices"), 1);
  try {
    effective_config(json{{"task", "image"}, {"prompt_length", 16}, {"batch", 10}, {"devices", 4}}, "cell.json");
    ADD_FAILURE() << "batch 10 on 4 devices accepted";
  } catch (const InputError& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find("devices"), std::string::npos) << w;
    EXPECT_NE(w.find("batch 10"), std::string::npos) << w;
  }
  // The trainer refuses it too (a config that skipped validation).
  json c = tiny_config();
  c["devices"] = 3;
  EXPECT_THROW(train_config_of(c), std::runtime_error);
}

// A GPU asked of a build without CUDA, or of a machine without a visible GPU, is an
// error that says which; an unknown device name is refused. (With a GPU, the CUDA tests
// in test_trainer_cuda.cpp train there instead.)
TEST(TrainerDevice, GpuRequestWithoutGpuIsAClearError) {
  EXPECT_THROW(cuda_device_index("gpu"), std::invalid_argument);
  EXPECT_THROW(cuda_device_index("cuda:"), std::invalid_argument);
  EXPECT_EQ(cuda_device_index("cpu"), -1);
  EXPECT_EQ(cuda_device_index("cuda"), 0);
  EXPECT_EQ(cuda_device_index("cuda:3"), 3);
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: the error cases cannot happen here";
  TaskContext ctx;
  ctx.device = "cuda";
  try {
    train_cell(tiny_config(), ctx, synthetic_data());
    ADD_FAILURE() << "trained on a GPU that is not there";
  } catch (const std::runtime_error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(cuda_backend_built() ? "0 CUDA devices are visible" : "no CUDA backend"), std::string::npos) << w;
  }
}

// The CPU trains in fp32 only (kernels/precision.h): a bf16 or tf32 cell on the CPU
// fails before any step, with a message naming the key and the way out; fp32 (the
// default) trains.
TEST(TrainerPrecision, CpuRefusesBf16AndTf32NamingTheKey) {
  TaskContext ctx;
  ctx.device = "cpu";
  for (const char* p : {"bf16", "tf32"}) {
    SCOPED_TRACE(p);
    json c = tiny_config();
    c["precision"] = p;
    EXPECT_EQ(model_config_of(c, synthetic_data()).precision, parse_precision(p));
    try {
      train_cell(c, ctx, synthetic_data());
      ADD_FAILURE() << "trained " << p << " on the CPU";
    } catch (const std::runtime_error& e) {
      const std::string w = e.what();
      EXPECT_NE(w.find(std::string("precision \"") + p + "\""), std::string::npos) << w;
      EXPECT_NE(w.find("need a CUDA device"), std::string::npos) << w;
    }
  }
  json c = tiny_config();
  c["precision"] = "fp32";
  c["steps"] = 2;
  EXPECT_EQ(train_cell(c, ctx, synthetic_data()).status, CellStatus::complete);
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

TEST_F(TrainerTest, UnscaledPoly9WithLr1Diverges) {
  json c = tiny_config();
  c["activation"] = "poly";
  c["degree"] = 9;
  c["scale"] = "none";
  c["lr"] = 1.0;
  c["clip"] = 0.0;
  c["warmup_steps"] = 0;
  c["steps"] = 200;
  c["log_every"] = 1;
  TaskContext ctx;
  const TaskOutput o = train_cell(c, ctx, synthetic_data());
  EXPECT_EQ(o.status, CellStatus::diverged);
  ASSERT_GE(o.diverged_at_step, 0);
  const auto& steps = std::get<std::vector<int64_t>>(series(o, "/train/step").data);
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps.back(), o.diverged_at_step);  // the trajectory is kept, up to the bad step
  const float last_loss = std::get<std::vector<float>>(series(o, "/train/loss").data).back();
  const float last_gn = std::get<std::vector<float>>(series(o, "/train/grad_norm").data).back();
  EXPECT_FALSE(std::isfinite(last_loss) && std::isfinite(last_gn));
  EXPECT_TRUE(std::isnan(o.final_metrics.at("test_loss")));
}

bool have_fashion_mnist() {
  return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
}

std::string run_image_error(const json& config) {
  TaskContext ctx;
  ctx.train = [](const json&, const TaskContext&, const TrainingData&) { return TaskOutput{}; };
  try {
    run_image(config, ctx);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST_F(TrainerTest, ImageTaskErrorsNameTheProblem) {
  json c = tiny_config();
  c["prompt_length"] = 17;
  EXPECT_NE(run_image_error(c).find("16, 49, 196 or 784"), std::string::npos) << run_image_error(c);
  c["prompt_length"] = 16;
  ::setenv("ATTNSWEEP_FASHION_MNIST_DIR", path("none").c_str(), 1);
  std::string e = run_image_error(c);
  EXPECT_NE(e.find("dataset-fashion-mnist"), std::string::npos) << e;
  if (have_fashion_mnist()) {
    // A truncated .gz: copy the real files, cut one short.
    fs::create_directories(path("fm"));
    for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                          "t10k-labels-idx1-ubyte.gz"})
      fs::copy_file(std::string("/usr/share/datasets/fashion-mnist/") + f, path(std::string("fm/") + f));
    fs::resize_file(path("fm/train-images-idx3-ubyte.gz"), 100000);
    ::setenv("ATTNSWEEP_FASHION_MNIST_DIR", path("fm").c_str(), 1);
    e = run_image_error(c);
    EXPECT_NE(e.find("truncated"), std::string::npos) << e;
    EXPECT_NE(e.find("train-images-idx3-ubyte.gz"), std::string::npos) << e;
  }
  ::unsetenv("ATTNSWEEP_FASHION_MNIST_DIR");
}

// Reads every dataset of a result file, as raw bytes, by path.
std::map<std::string, std::vector<char>> datasets_of(const std::string& file) {
  std::map<std::string, std::vector<char>> out;
  h5::File f = h5::File::open_read(file);
  for (const char* p : {"/train/step", "/eval/step"}) {
    auto v = f.open_dataset(p).read<int64_t>();
    out[p].assign(reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data() + v.size()));
  }
  for (const char* p : {"/train/loss", "/train/accuracy", "/train/lr", "/train/grad_norm", "/norms/attn_fro",
                        "/norms/jac_fro", "/eval/loss", "/eval/accuracy"}) {
    auto v = f.open_dataset(p).read<float>();
    out[p].assign(reinterpret_cast<const char*>(v.data()), reinterpret_cast<const char*>(v.data() + v.size()));
  }
  return out;
}

// The whole path of `attnsweep train`: a stop (as SIGTERM sets it) after the first
// periodic checkpoint, exit 75, a resumed run, and a result file whose datasets equal
// an uninterrupted run's byte for byte; the checkpoint is gone afterwards.
TEST_F(TrainerTest, RunCellStopAndResumeGiveTheSameFile) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  json c = tiny_config();
  c["prompt_length"] = 16;
  c["steps"] = 80;
  c["checkpoint_every"] = 10;
  c["eval_batches"] = 2;
  c["dim"] = 32;
  c["batch"] = 32;
  RunCellOptions opt;
  opt.threads = 1;  // 2 threads of a spinning OpenMP runtime crawl on a shared 2-core machine
  ASSERT_EQ(train_cell_to_file("cellA", c, path("a.h5"), opt), 0);

  std::atomic<int> stop{0};
  opt.stop = &stop;
  opt.checkpoint = path("b.ckpt");
  std::atomic<bool> done{false};
  std::thread watcher([&] {  // stop as soon as the first checkpoint (step 10) exists
    while (!done && !fs::exists(opt.checkpoint)) std::this_thread::sleep_for(std::chrono::microseconds(200));
    stop = SIGTERM;
  });
  const int rc = train_cell_to_file("cellA", c, path("b.h5"), opt);
  done = true;
  watcher.join();
  ASSERT_EQ(rc, 75) << "the run finished before the stop: make the cell longer";
  EXPECT_FALSE(fs::exists(path("b.h5")));
  EXPECT_TRUE(fs::exists(opt.checkpoint));
  stop = 0;
  ASSERT_EQ(train_cell_to_file("cellA", c, path("b.h5"), opt), 0);
  EXPECT_FALSE(fs::exists(opt.checkpoint));
  EXPECT_EQ(datasets_of(path("a.h5")), datasets_of(path("b.h5")));
}

TEST_F(TrainerTest, RunCellDivergedCellExitsZeroWithItsTrajectory) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  json c = tiny_config();
  c["prompt_length"] = 16;
  c["activation"] = "poly";
  c["degree"] = 9;
  c["scale"] = "none";
  c["lr"] = 1.0;
  c["steps"] = 100;
  c["eval_batches"] = 1;
  RunCellOptions opt;
  ASSERT_EQ(train_cell_to_file("cellD", c, path("d.h5"), opt), 0);
  h5::File f = h5::File::open_read(path("d.h5"));
  EXPECT_EQ(f.attribute_string("status"), "diverged");
  EXPECT_GE(f.attribute_int64("diverged_at_step"), 0);
  EXPECT_GT(f.open_dataset("/train/loss").size(), 0u);
}

}  // namespace
}  // namespace attnsweep

namespace {
std::optional<std::string> fix_of(const std::vector<std::pair<std::string, std::string>>& fixes, const std::string& k) {
  for (const auto& [name, value] : fixes)
    if (name == k) return value;
  return std::nullopt;
}
}  // namespace

// base/cpu_env.h: a bounded spin by default, passive waiting when the cores are
// oversubscribed, and whatever the user set is kept.
TEST(CpuEnv, WaitPolicyBoundedSpinPassiveWhenOversubscribedUserWins) {
  attnsweep::EnvGuard g1("OMP_WAIT_POLICY"), g2("GOMP_SPINCOUNT");
  ::unsetenv("OMP_WAIT_POLICY");
  ::unsetenv("GOMP_SPINCOUNT");
  auto f = attnsweep::cpu_env_fixes();
  EXPECT_EQ(fix_of(f, "GOMP_SPINCOUNT"), "10000");
  EXPECT_FALSE(fix_of(f, "OMP_WAIT_POLICY"));
  f = attnsweep::cpu_env_fixes(true);
  EXPECT_EQ(fix_of(f, "OMP_WAIT_POLICY"), "passive");
  EXPECT_FALSE(fix_of(f, "GOMP_SPINCOUNT"));
  ::setenv("OMP_WAIT_POLICY", "active", 1);
  EXPECT_FALSE(fix_of(attnsweep::cpu_env_fixes(), "GOMP_SPINCOUNT"));
  EXPECT_FALSE(fix_of(attnsweep::cpu_env_fixes(true), "OMP_WAIT_POLICY"));
  ::unsetenv("OMP_WAIT_POLICY");
  ::setenv("GOMP_SPINCOUNT", "500", 1);
  EXPECT_FALSE(fix_of(attnsweep::cpu_env_fixes(), "GOMP_SPINCOUNT"));
  EXPECT_FALSE(fix_of(attnsweep::cpu_env_fixes(true), "OMP_WAIT_POLICY"));
}
