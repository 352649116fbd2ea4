// The CUDA trainer (worker/training/cuda_trainer.h) against the CPU one: one forward/backward of
// every model shape at the same weights (loss, norms, every gradient tensor), 50 training
// steps of whole cells, determinism, checkpoint/resume on CUDA and across backends, the
// NCCL all-reduce, and data parallelism on two GPUs. Every test needs a GPU (two for the
// data-parallel ones) and reports SKIPPED without one, never passes vacuously.
#ifdef ATTNSWEEP_HAVE_CUDA

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "experiments/rng.h"
#include "kernels/attention_cuda.h"
#include "kernels/collective_cuda.h"
#include "kernels/device.h"
#include "tests/unit/trainer_test_util.h"
#include "worker/training/cuda_trainer.h"
#include "worker/training/train_cell.h"

namespace attnsweep {
namespace {
namespace fs = std::filesystem;

#define SKIP_WITHOUT_GPUS(n)     \
  if (cuda_device_count() < (n)) \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), " << cuda_device_count() << " visible"

// Paper B's in-context regression, small: N tokens of dim features, the target a fixed
// linear function of the prompt's mean and the query. A function of (split, index) only.
TrainingData regression_data(int64_t tokens, int64_t dim) {
  TrainingData d;
  d.n_train = 512;
  d.n_test = 64;
  d.tokens = tokens;
  d.in_dim = dim;
  d.classes = 0;
  d.fill = [tokens, dim](int split, const int64_t* idx, int64_t count, float* x, int32_t*, float* yv) {
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), 0x5EEDull, static_cast<uint64_t>(idx[i])}));
      double y = 0;
      for (int64_t j = 0; j < tokens * dim; ++j) {
        const double v = rng.normal();
        x[i * tokens * dim + j] = static_cast<float>(v);
        y += (j % dim == 0 ? 0.5 : 0.0) * v / static_cast<double>(tokens) + (j / dim == tokens - 1 ? 0.1 * v : 0.0);
      }
      yv[i] = static_cast<float>(y);
    }
  };
  return d;
}

// Token ids in [0, vocab) as floats, 3 classes from the ids' sum.
TrainingData token_data(int64_t tokens, int64_t vocab) {
  TrainingData d;
  d.n_train = 512;
  d.n_test = 64;
  d.tokens = tokens;
  d.in_dim = 1;
  d.classes = 3;
  d.vocab = vocab;
  d.fill = [tokens, vocab](int split, const int64_t* idx, int64_t count, float* x, int32_t* yc, float*) {
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), 0x70Cull, static_cast<uint64_t>(idx[i])}));
      int64_t sum = 0;
      for (int64_t j = 0; j < tokens; ++j) {
        const int64_t id =
            std::min<int64_t>(vocab - 1, static_cast<int64_t>(rng.uniform() * static_cast<double>(vocab)));
        x[i * tokens + j] = static_cast<float>(id);
        sum += id;
      }
      yc[i] = static_cast<int32_t>(sum % 3);
    }
  };
  return d;
}

// ListOps' shape: token ids in [1, vocab) followed by padding (id 0, pad_id 0), a length
// per sample from 1 to `tokens`, 3 classes from the real ids' sum. Exercises the key mask,
// the masked mean pool (or the CLS row) and the norms of the real query rows.
TrainingData padded_token_data(int64_t tokens, int64_t vocab) {
  TrainingData d = token_data(tokens, vocab);
  d.pad_id = 0;
  d.fill = [tokens, vocab](int split, const int64_t* idx, int64_t count, float* x, int32_t* yc, float*) {
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), 0x9ADull, static_cast<uint64_t>(idx[i])}));
      const int64_t len = 1 + static_cast<int64_t>(rng.uniform() * static_cast<double>(tokens - 1));
      int64_t sum = 0;
      for (int64_t j = 0; j < tokens; ++j) {
        int64_t id = 0;
        if (j < len)
          id = 1 + std::min<int64_t>(vocab - 2, static_cast<int64_t>(rng.uniform() * static_cast<double>(vocab - 1)));
        x[i * tokens + j] = static_cast<float>(id);
        sum += id;
      }
      yc[i] = static_cast<int32_t>(sum % 3);
    }
  };
  return d;
}

// Per-token regression (the pde task's shape, Head::token_regress): N tokens of dim
// features, one target per token, a fixed linear function of the token and its left
// neighbour. A function of (split, index) only.
TrainingData per_token_data(int64_t tokens, int64_t dim) {
  TrainingData d;
  d.n_train = 512;
  d.n_test = 64;
  d.tokens = tokens;
  d.in_dim = dim;
  d.classes = 0;
  d.targets_per_sample = tokens;
  d.fill = [tokens, dim](int split, const int64_t* idx, int64_t count, float* x, int32_t*, float* yv) {
    for (int64_t i = 0; i < count; ++i) {
      Rng rng(seed_of({static_cast<uint64_t>(split), 0x7E6ull, static_cast<uint64_t>(idx[i])}));
      float* xi = x + i * tokens * dim;
      for (int64_t j = 0; j < tokens * dim; ++j) xi[j] = static_cast<float>(rng.normal());
      for (int64_t t = 0; t < tokens; ++t)
        yv[i * tokens + t] = 0.5f * xi[t * dim] - 0.25f * (t > 0 ? xi[(t - 1) * dim + 1] : 0.0f);
    }
  };
  // The task eval hook (TrainingData::measure) sees host weights on either backend.
  d.eval_metrics = {{"head_w_sq", "/eval/head_w_sq", "sum of the squared head weights"}};
  d.measure = [](const ModelWeights& w) {
    const ModelWeights::Tensor& h = w.tensors.at("head_w");
    double s = 0;
    for (int64_t j = 0; j < h.shape[0] * h.shape[1]; ++j) s += static_cast<double>(h.data[j]) * h.data[j];
    return std::vector<double>{s};
  };
  return d;
}

struct Case {
  std::string name;
  json config;  // over tiny_config()
  TrainingData data;
};

// Every model shape and activation family the trainer has: mean-pool and CLS, patch and
// token embedding, the read-out; softmax, a scaled polynomial, ReLU / N. Head widths 16
// take the fused attention kernels, the others (4, 8) their materialising fallback.
std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back(
      {"classify softmax mean-pool (fused attention, hd 16)", json{{"dim", 32}, {"heads", 2}}, synthetic_data()});
  v.push_back(
      {"classify relu/N cls", json{{"activation", "relu"}, {"scale", "inv_n"}, {"cls", true}}, synthetic_data()});
  v.push_back({"classify poly3/sqrtN tokens",
               json{{"activation", "poly"}, {"degree", 3}, {"scale", "inv_sqrt_n"}, {"heads", 4}}, token_data(10, 13)});
  v.push_back(
      {"readout softmax (fused, hd 16)", json{{"dim", 16}, {"layers", 1}, {"heads", 1}}, regression_data(9, 16)});
  v.push_back({"readout poly2/N",
               json{{"dim", 8}, {"layers", 1}, {"heads", 1}, {"activation", "poly"}, {"degree", 2}, {"scale", "inv_n"}},
               regression_data(12, 8)});
  v.push_back({"token_regress softmax (per-token head)", json{{"dim", 16}, {"heads", 2}}, per_token_data(7, 4)});
  v.push_back({"classify softmax padded tokens, masked mean pool (fused, hd 16)", json{{"dim", 32}, {"heads", 2}},
               padded_token_data(12, 9)});
  v.push_back({"classify poly3/sqrtN padded tokens, cls",
               json{{"activation", "poly"}, {"degree", 3}, {"scale", "inv_sqrt_n"}, {"cls", true}},
               padded_token_data(12, 9)});
  return v;
}

json config_of(const Case& c) {
  json j = tiny_config();
  for (auto it = c.config.begin(); it != c.config.end(); ++it) j[it.key()] = it.value();
  return j;
}

std::vector<float> floats(const TaskOutput& o, const std::string& p) {
  return std::get<std::vector<float>>(series(o, p).data);
}

// ---- one forward / backward at the same weights ---------------------------------------
// Tolerances: both sides run the same float32 math; they differ by summation order
// (cuBLAS against OpenBLAS, GPU reductions against the CPU's), ~1e-7 relative per op
// and a few 1e-7 through the 2-layer model. The loss and norms are compared to 1e-5
// relative and each gradient tensor to 1e-4 of its largest entry: 100x what rounding
// gives, far below a wrong index, a missing term or a stale buffer (order-1 errors).
TEST(CudaModel, LossNormsAndGradientsMatchCpu) {
  SKIP_WITHOUT_GPUS(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const json cfg = config_of(c);
    const ModelConfig mc = model_config_of(cfg, c.data);
    Model cpu(mc);
    CudaModel gpu(mc, 0);
    cpu.init(7, 0.0);
    gpu.init(7, 0.0);
    const int64_t n = cpu.num_params(), B = 16;
    std::vector<float> pc(static_cast<size_t>(n)), pg(static_cast<size_t>(n));
    cpu.get_params(pc.data());
    gpu.get_params(pg.data());
    ASSERT_EQ(std::memcmp(pc.data(), pg.data(), pc.size() * sizeof(float)), 0) << "init must be drawn on the host";

    std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim)),
        yv(static_cast<size_t>(B * mc.targets_per_sample()));
    std::vector<int32_t> yc(static_cast<size_t>(B));
    std::vector<int64_t> idx(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) idx[static_cast<size_t>(i)] = 3 * i + 1;
    c.data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
    for (int pass = 0; pass < 2; ++pass) {  // the second pass reuses every buffer
      const ForwardStats fc = cpu.forward(x.data(), yc.data(), yv.data(), B, true);
      const ForwardStats fg = gpu.forward(x.data(), yc.data(), yv.data(), B, true);
      EXPECT_NEAR(fg.loss, fc.loss, 1e-5 * std::fabs(fc.loss)) << "pass " << pass;
      EXPECT_LE(std::abs(fg.correct - fc.correct), 1) << "argmax ties may flip one row, not more";
      ASSERT_EQ(fg.attn_fro.size(), fc.attn_fro.size());
      for (size_t i = 0; i < fc.attn_fro.size(); ++i) {
        EXPECT_NEAR(fg.attn_fro[i], fc.attn_fro[i], 1e-5 * fc.attn_fro[i]) << "attn_fro " << i;
        EXPECT_NEAR(fg.jac_fro[i], fc.jac_fro[i], 1e-5 * fc.jac_fro[i] + 1e-12) << "jac_fro " << i;
      }
      cpu.backward();
      gpu.backward();
      std::vector<float> gc(static_cast<size_t>(n)), gg(static_cast<size_t>(n));
      cpu.get_grads(gc.data());
      gpu.get_grads(gg.data());
      for (const TensorInfo& t : cpu.tensors()) {
        if (t.size == 0) continue;
        double scale = 0, worst = 0;
        for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
          ASSERT_TRUE(std::isfinite(gg[static_cast<size_t>(i)])) << t.name;
          scale = std::max(scale, std::fabs(static_cast<double>(gc[static_cast<size_t>(i)])));
          worst =
              std::max(worst, std::fabs(static_cast<double>(gg[static_cast<size_t>(i)]) - gc[static_cast<size_t>(i)]));
        }
        EXPECT_LE(worst, 1e-4 * scale + 1e-12) << t.name << " (largest |grad| " << scale << ")";
      }
    }
    // The backend's own buffers were allocated from their declared plan when the model was
    // sized for B (worker/model/device_memory.h): the two steps grew none of them.
    EXPECT_EQ(gpu.backend().unplanned_growths(), 0)
        << "outgrew backend_buffers' plan: " << gpu.backend().unplanned_buffers();
  }
}

// bf16 and tf32 (kernels/precision.h) against fp32 on the same GPU, one forward and
// backward at the same weights. bf16 rounds every GEMM and attention input to 8
// significant bits (relative 2^-9 = 2e-3 per element); through a 2-layer model the loss
// and norms stay within about 1e-2 relative, the gradients within a few 1e-2 of their
// largest entry. Bounds: loss and norms 3e-2, gradients 1e-1 of the largest entry for
// bf16; tf32 (11 significant bits, 8x finer) 5e-3 and 2e-2. A dropped conversion, a wrong
// leading dimension or a stale bf16 copy gives order-1 errors; and bf16 must differ from
// fp32 at all (else the conversions were skipped).
void expect_precisions_close_to_fp32(const Case& c) {
  {
    SCOPED_TRACE(c.name);
    const json cfg = config_of(c);
    const ModelConfig mc = model_config_of(cfg, c.data);
    const int64_t B = 16;
    std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim)),
        yv(static_cast<size_t>(B * mc.targets_per_sample()));
    std::vector<int32_t> yc(static_cast<size_t>(B));
    std::vector<int64_t> idx(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) idx[static_cast<size_t>(i)] = 5 * i + 2;
    c.data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
    auto run = [&](Precision p, ForwardStats& f, std::vector<float>& g) {
      ModelConfig m = mc;
      m.precision = p;
      CudaModel gpu(m, 0);
      EXPECT_EQ(gpu.backend().precision(), p);
      gpu.init(7, 0.0);
      f = gpu.forward(x.data(), yc.data(), yv.data(), B, true);
      gpu.backward();
      g.resize(static_cast<size_t>(gpu.num_params()));
      gpu.get_grads(g.data());
      return gpu.tensors();
    };
    ForwardStats f32;
    std::vector<float> g32;
    const std::vector<TensorInfo> tensors = run(Precision::fp32, f32, g32);
    for (auto [p, tol, gtol] : {std::tuple{Precision::bf16, 3e-2, 1e-1}, std::tuple{Precision::tf32, 5e-3, 2e-2}}) {
      SCOPED_TRACE(precision_name(p));
      ForwardStats f;
      std::vector<float> g;
      run(p, f, g);
      EXPECT_NEAR(f.loss, f32.loss, tol * std::fabs(f32.loss));
      ASSERT_EQ(f.attn_fro.size(), f32.attn_fro.size());
      for (size_t i = 0; i < f32.attn_fro.size(); ++i) {
        EXPECT_NEAR(f.attn_fro[i], f32.attn_fro[i], tol * f32.attn_fro[i]) << "attn_fro " << i;
        EXPECT_NEAR(f.jac_fro[i], f32.jac_fro[i], tol * f32.jac_fro[i] + 1e-12) << "jac_fro " << i;
      }
      double moved = 0;
      for (const TensorInfo& t : tensors) {
        if (t.size == 0) continue;
        double scale = 0, worst = 0;
        for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
          const auto u = static_cast<size_t>(i);
          ASSERT_TRUE(std::isfinite(g[u])) << t.name;
          scale = std::max(scale, std::fabs(static_cast<double>(g32[u])));
          worst = std::max(worst, std::fabs(static_cast<double>(g[u]) - g32[u]));
        }
        EXPECT_LE(worst, gtol * scale + 1e-12) << t.name << " (largest |grad| " << scale << ")";
        moved = std::max(moved, worst);
      }
      if (p == Precision::bf16) {
        EXPECT_GT(moved, 0.0) << "bf16 gave fp32's bits: nothing was rounded";
      }
    }
  }
}

TEST(CudaModel, Bf16AndTf32StayCloseToFp32) {
  SKIP_WITHOUT_GPUS(1);
  for (const Case& c : cases()) expect_precisions_close_to_fp32(c);
}

// The same at a head width of 64, the tensor-core kernels' (kernels/attention_cuda.h): with
// ATTNSWEEP_CUDA_MMA=1 (ctest unit_cuda_mma_trainer) the model's bf16 attention, forward
// and backward, runs on them; otherwise on the fused kernels.
TEST(CudaModel, Bf16AtHeadWidth64StaysCloseToFp32) {
  SKIP_WITHOUT_GPUS(1);
  const Case c{"classify softmax, hd 64", json{{"dim", 128}, {"heads", 2}, {"layers", 1}}, synthetic_data()};
  const ModelConfig mc = model_config_of(config_of(c), c.data);
  const AttentionShape one_head{1, 1, mc.tokens, mc.tokens, 64, 64};
  const char* mma = std::getenv("ATTNSWEEP_CUDA_MMA");
  EXPECT_EQ(attention_cuda_mma_opted_in(one_head, CudaDType::bf16), mma != nullptr && std::string(mma) == "1")
      << "a head of 64 takes the tensor-core path exactly when ATTNSWEEP_CUDA_MMA=1";
  expect_precisions_close_to_fp32(c);
}

// The kernel timer of bench/ (CudaBackend::time_kernels): off, nothing is recorded; on,
// a forward and backward record a positive time, below the wall time around them (the
// ops run inside it), and taking it resets it.
TEST(CudaModel, KernelTimesAreRecordedOnlyWhenAsked) {
  SKIP_WITHOUT_GPUS(1);
  const Case c = cases().front();
  const ModelConfig mc = model_config_of(config_of(c), c.data);
  CudaModel gpu(mc, 0);
  gpu.init(3, 0.0);
  const int64_t B = 32;
  std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim)), yv(static_cast<size_t>(B));
  std::vector<int32_t> yc(static_cast<size_t>(B));
  std::vector<int64_t> idx(static_cast<size_t>(B));
  for (int64_t i = 0; i < B; ++i) idx[static_cast<size_t>(i)] = i;
  c.data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
  gpu.forward(x.data(), yc.data(), yv.data(), B, false);
  gpu.backward();
  EXPECT_EQ(gpu.backend().take_kernel_ms(), 0.0);
  gpu.backend().time_kernels(true);
  const auto t0 = std::chrono::steady_clock::now();
  gpu.forward(x.data(), yc.data(), yv.data(), B, false);
  gpu.backward();
  const double ms = gpu.backend().take_kernel_ms();
  const double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(ms, 0.0);
  EXPECT_LE(ms, wall_ms);
  EXPECT_EQ(gpu.backend().take_kernel_ms(), 0.0);
}

// ---- whole cells ----------------------------------------------------------------------

class CudaTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() /
           ("attnsweep_trainer_cuda_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const std::string& rel) const { return (dir_ / rel).string(); }
  static TaskContext on(const char* device) {
    TaskContext ctx;
    ctx.device = device;
    return ctx;
  }
  fs::path dir_;
};

// 50 AdamW steps (warm-up, cosine, clipping), every step logged. The two backends start
// from the same bits and differ by float32 rounding in each step (~1e-7 relative, see
// above); AdamW divides each gradient by its own running scale, so relative errors stay
// relative and grow slowly (the CPU's k = 2 vs k = 1 comparison, the same kind of
// difference, stays below 1e-7 over 20 steps). Bounds: step 0 (same weights) 1e-5 on
// loss and norms; all 50 steps 1e-3 relative on the loss and the norms, 1e-2 on the
// gradient norm (a difference of squares of many small terms, the most sensitive). A
// wrong update, schedule or clip changes the loss by more than 1e-2 within a few steps.
TEST_F(CudaTrainerTest, MatchesCpuTrajectoryFor50Steps) {
  SKIP_WITHOUT_GPUS(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    json cfg = config_of(c);
    cfg["steps"] = 50;
    cfg["log_every"] = 1;
    cfg["eval_every"] = 25;
    cfg["lr"] = 3e-3;
    const TaskOutput cpu = train_cell(cfg, on("cpu"), c.data);
    const TaskOutput gpu = train_cell(cfg, on("cuda"), c.data);
    ASSERT_EQ(cpu.status, CellStatus::complete);
    ASSERT_EQ(gpu.status, CellStatus::complete);
    const auto lc = floats(cpu, "/train/loss"), lg = floats(gpu, "/train/loss");
    const auto nc = floats(cpu, "/train/grad_norm"), ng = floats(gpu, "/train/grad_norm");
    const auto ac = floats(cpu, "/norms/attn_fro"), ag = floats(gpu, "/norms/attn_fro");
    const auto jc = floats(cpu, "/norms/jac_fro"), jg = floats(gpu, "/norms/jac_fro");
    ASSERT_EQ(lc.size(), 50u);
    ASSERT_EQ(lg.size(), lc.size());
    ASSERT_EQ(ag.size(), ac.size());
    const size_t per_step = ac.size() / lc.size();
    for (size_t s = 0; s < lc.size(); ++s) {
      const double tl = s == 0 ? 1e-5 : 1e-3, tn = s == 0 ? 1e-5 : 1e-2;
      EXPECT_NEAR(lg[s], lc[s], tl * std::fabs(lc[s])) << "loss, step " << s;
      EXPECT_NEAR(ng[s], nc[s], tn * nc[s]) << "grad_norm, step " << s;
      for (size_t i = s * per_step; i < (s + 1) * per_step; ++i) {
        EXPECT_NEAR(ag[i], ac[i], tl * ac[i]) << "attn_fro, step " << s << " entry " << i % per_step;
        EXPECT_NEAR(jg[i], jc[i], tl * jc[i] + 1e-12) << "jac_fro, step " << s << " entry " << i % per_step;
      }
    }
    const auto ec = floats(cpu, "/eval/loss"), eg = floats(gpu, "/eval/loss");
    ASSERT_EQ(eg.size(), ec.size());
    for (size_t i = 0; i < ec.size(); ++i) EXPECT_NEAR(eg[i], ec[i], 1e-3 * std::fabs(ec[i])) << "eval " << i;
    ASSERT_EQ(gpu.final_metrics.size(), cpu.final_metrics.size());
    for (const char* name : {"test_loss", "test_rel_l2", "head_w_sq"}) {  // per-token head and task hook
      if (!cpu.final_metrics.count(name)) continue;
      const double want = cpu.final_metrics.at(name);
      ASSERT_TRUE(std::isfinite(want)) << name;
      EXPECT_NEAR(gpu.final_metrics.at(name), want, 1e-3 * std::fabs(want)) << name;
    }
    EXPECT_GT(lc.front() - *std::min_element(lc.begin(), lc.end()), 1e-2 * lc.front())
        << "the runs should move, or the comparison says nothing";
  }
}

// Launch-free steps (TrainConfig::cuda_graphs): the steps that do not log run as one
// replayed CUDA graph, whose kernels are the op-by-op step's and whose clip and update
// read their scalars on the device with the host path's arithmetic. So 30 steps with
// graphs (logging every 7th: eager steps between graphed ones, a re-capture when the
// logged steps allocate) give the parameters of 30 op-by-op steps bit for bit, and the
// same losses, gradient norms and finiteness every step; and most steps were graphed.
TEST_F(CudaTrainerTest, GraphReplayIsBitIdenticalToOpByOp) {
  SKIP_WITHOUT_GPUS(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const json cfg = config_of(c);
    const ModelConfig mc = model_config_of(cfg, c.data);
    TrainConfig tc = train_config_of(cfg);
    tc.steps = 30;
    const int64_t B = tc.batch;
    std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim)),
        yv(static_cast<size_t>(B * mc.targets_per_sample()));
    std::vector<int32_t> yc(static_cast<size_t>(B));
    std::vector<int64_t> idx(static_cast<size_t>(B));
    std::vector<std::vector<float>> params(2);
    std::vector<std::vector<TrainStepResult>> steps(2);
    for (int graphs = 0; graphs < 2; ++graphs) {
      TrainConfig t = tc;
      t.cuda_graphs = graphs == 1;
      CudaTrainer tr(mc, t, 0);
      tr.model().init(t.init_seed, t.init_std);
      for (int64_t s = 0; s < tc.steps; ++s) {
        for (int64_t i = 0; i < B; ++i) idx[static_cast<size_t>(i)] = (s * B + i) % c.data.n_train;
        c.data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
        steps[graphs].push_back(tr.step(x.data(), yc.data(), yv.data(), B, s, s % 7 == 0));
      }
      params[graphs] = tr.params_host();
      if (graphs == 1) {
        EXPECT_GE(tr.graphed_steps(), 15) << "most of the 30 steps should have run as a graph";
      } else {
        EXPECT_EQ(tr.graphed_steps(), 0);
      }
    }
    ASSERT_EQ(params[0].size(), params[1].size());
    EXPECT_EQ(std::memcmp(params[0].data(), params[1].data(), params[0].size() * sizeof(float)), 0)
        << "graph replay changed the parameters";
    for (size_t s = 0; s < steps[0].size(); ++s) {
      const TrainStepResult &a = steps[0][s], &b = steps[1][s];
      EXPECT_EQ(std::memcmp(&a.fwd.loss, &b.fwd.loss, sizeof(double)), 0) << "loss, step " << s;
      EXPECT_EQ(a.fwd.correct, b.fwd.correct) << "step " << s;
      EXPECT_EQ(std::memcmp(&a.grad_norm, &b.grad_norm, sizeof(double)), 0) << "grad_norm, step " << s;
      EXPECT_EQ(a.finite, b.finite) << "step " << s;
      EXPECT_EQ(a.lr, b.lr) << "step " << s;
    }
  }
}

// The whole cell through train_cell with ATTNSWEEP_CUDA_GRAPHS=1 (evaluations between
// the steps, a larger eval batch that reallocates and forces a re-capture): the same
// file contents as without.
TEST_F(CudaTrainerTest, GraphedCellGivesTheSameOutput) {
  SKIP_WITHOUT_GPUS(1);
  const Case c = cases().front();
  json cfg = config_of(c);
  cfg["steps"] = 40;
  const TaskOutput plain = train_cell(cfg, on("cuda"), c.data);
  setenv("ATTNSWEEP_CUDA_GRAPHS", "1", 1);
  const TaskOutput graphed = train_cell(cfg, on("cuda"), c.data);
  unsetenv("ATTNSWEEP_CUDA_GRAPHS");
  expect_identical(plain, graphed);
}

TEST_F(CudaTrainerTest, TwoRunsAreBitIdentical) {
  SKIP_WITHOUT_GPUS(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const json cfg = config_of(c);
    expect_identical(train_cell(cfg, on("cuda"), c.data), train_cell(cfg, on("cuda"), c.data));
  }
}

// Stop at the boundary of step 11, checkpoint, resume: bit-identical to an
// uninterrupted CUDA run (parameters and AdamW state go through the host file and back).
TEST_F(CudaTrainerTest, StopCheckpointResumeIsBitIdentical) {
  SKIP_WITHOUT_GPUS(1);
  for (const char* opt : {"adamw", "sgd"}) {
    SCOPED_TRACE(opt);
    json c = tiny_config();
    c["optimizer"] = opt;
    const TaskOutput whole = train_cell(c, on("cuda"), synthetic_data());
    std::atomic<int> stop{0};
    TaskContext ctx = on("cuda");
    ctx.stop = &stop;
    ctx.checkpoint_path = path(std::string("cell_") + opt + ".ckpt");
    const TaskOutput first = train_cell(c, ctx, synthetic_data([&](int64_t k) {
                                          if (k == 10) stop = SIGUSR1;
                                        }));
    EXPECT_EQ(first.status, CellStatus::interrupted);
    ASSERT_TRUE(fs::exists(ctx.checkpoint_path));
    stop = 0;
    expect_identical(whole, train_cell(c, ctx, synthetic_data()));
  }
}

// One checkpoint format: a cell stopped on one backend resumes on the other. The rows
// logged before the stop come from the checkpoint (bit-identical to the first backend's
// run); the rest follow the second backend's own run within the tolerance above.
TEST_F(CudaTrainerTest, CheckpointResumesOnTheOtherBackend) {
  SKIP_WITHOUT_GPUS(1);
  const json c = tiny_config();
  const TaskOutput cpu = train_cell(c, on("cpu"), synthetic_data());
  const TaskOutput gpu = train_cell(c, on("cuda"), synthetic_data());
  for (const auto& [from, to] : {std::pair<const char*, const char*>{"cpu", "cuda"}, {"cuda", "cpu"}}) {
    SCOPED_TRACE(std::string(from) + " -> " + to);
    std::atomic<int> stop{0};
    TaskContext first = on(from);
    first.stop = &stop;
    first.checkpoint_path = path(std::string("x_") + from + ".ckpt");
    EXPECT_EQ(train_cell(c, first, synthetic_data([&](int64_t k) {
                           if (k == 10) stop = SIGUSR1;
                         }))
                  .status,
              CellStatus::interrupted);
    TaskContext second = on(to);
    second.checkpoint_path = first.checkpoint_path;
    const TaskOutput resumed = train_cell(c, second, synthetic_data());
    ASSERT_EQ(resumed.status, CellStatus::complete);
    const auto& before = std::string(from) == "cpu" ? cpu : gpu;
    const auto steps = std::get<std::vector<int64_t>>(series(resumed, "/train/step").data);
    const auto lr = floats(resumed, "/train/loss"), lb = floats(before, "/train/loss");
    ASSERT_EQ(lr.size(), lb.size());
    for (size_t i = 0; i < lr.size(); ++i) {
      if (steps[i] < 11)
        EXPECT_EQ(std::memcmp(&lr[i], &lb[i], sizeof(float)), 0) << "step " << steps[i];
      else
        EXPECT_NEAR(lr[i], lb[i], 1e-3 * std::fabs(lb[i])) << "step " << steps[i];
    }
  }
}

// ---- NCCL and data parallelism ----------------------------------------------------------------

// A staged input's pinned buffer is refilled only once its last copy has run: two batches
// staged into one slot back to back, with no synchronisation between them, each reach the
// device intact. The emulated device runs only what the host waits for, so without the
// event synchronisation in CudaBackend::input_bytes the first copy reads the second batch
// (the breakage pinned_batch_overwritten_before_its_copy, tests/emulator/breakages.sh).
TEST(CudaBackendInputs, AStagedBatchIsNotOverwrittenBeforeItsCopy) {
  SKIP_WITHOUT_GPUS(1);
  CudaBackend be(0);
  const int64_t n = 4099;
  DeviceArray<float> kept;
  be.allocate(kept, n);
  std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n), -7.0f);
  for (int64_t i = 0; i < n; ++i) a[static_cast<size_t>(i)] = static_cast<float>(i);
  const float* first = be.input(kInputX, a.data(), n);
  // Behind the first copy on the stream: keep what it brought.
  ASSERT_EQ(cudaMemcpyAsync(kept.data(), first, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice,
                            be.stream()),
            cudaSuccess);
  const float* second = be.input(kInputX, b.data(), n);
  std::vector<float> got(static_cast<size_t>(n)), got2(static_cast<size_t>(n));
  be.download(got.data(), kept.data(), n);
  be.download(got2.data(), second, n);
  EXPECT_EQ(got, a) << "the first batch's copy read the pinned buffer after the second batch overwrote it";
  EXPECT_EQ(got2, b);
}

// The all-reduce itself, on every visible GPU up to 4 (one GPU: NCCL with a single rank,
// the path a k = 1 cell would take). Integer-valued floats: the sum is exact in any order.
TEST(CudaCollective, NcclAllReduceSumsOverVisibleGpus) {
  SKIP_WITHOUT_GPUS(1);
  ASSERT_EQ(nccl_unavailable_reason(), "") << "NCCL must load where there is a GPU";
  const int k = std::min(cuda_device_count(), 4);
  const int64_t n = 100003;
  std::vector<std::unique_ptr<CudaBackend>> be;
  std::vector<DeviceArray<float>> buf(static_cast<size_t>(k));
  std::vector<float*> ptrs;
  std::vector<CudaBackend*> raw;
  for (int r = 0; r < k; ++r) {
    be.push_back(std::make_unique<CudaBackend>(r));
    be.back()->allocate(buf[static_cast<size_t>(r)], n);
    std::vector<float> h(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) h[static_cast<size_t>(i)] = static_cast<float>((i % 97) * (r + 1));
    be.back()->upload(buf[static_cast<size_t>(r)].data(), h.data(), n);
    ptrs.push_back(buf[static_cast<size_t>(r)].data());
    raw.push_back(be.back().get());
  }
  std::vector<int> devices(static_cast<size_t>(k));
  std::vector<cudaStream_t> streams;
  for (int r = 0; r < k; ++r)
    devices[static_cast<size_t>(r)] = r, streams.push_back(be[static_cast<size_t>(r)]->stream());
  NcclComms* comms = nccl_comms_create(devices.data(), k);
  nccl_allreduce_sum(comms, ptrs.data(), n, streams.data());
  const float factor = static_cast<float>(k * (k + 1) / 2);
  for (int r = 0; r < k; ++r) {
    std::vector<float> h(static_cast<size_t>(n));
    be[static_cast<size_t>(r)]->download(h.data(), ptrs[static_cast<size_t>(r)], n);
    for (int64_t i = 0; i < n; ++i)
      if (h[static_cast<size_t>(i)] != static_cast<float>(i % 97) * factor) {
        ADD_FAILURE() << "rank " << r << " element " << i << ": " << h[static_cast<size_t>(i)];
        break;
      }
  }
  nccl_comms_destroy(comms);
  if (k >= 2) {  // and through the trainer's collective: the mean
    CudaBackend::Collective coll(raw);
    coll.allreduce_mean(ptrs, n);
    std::vector<float> h(static_cast<size_t>(n));
    be[1]->download(h.data(), ptrs[1], n);
    EXPECT_EQ(h[5], 5.0f * factor) << "sum of k equal buffers / k";
  }
}

// k = 2 GPUs against k = 1 on the same global batch, as the CPU test
// TrainerTest.DataParallelTwoDevicesMatchOne: not bitwise (shard sums regrouped, NCCL's
// float32 sum), a few ulps per step; 1e-5 relative on loss and grad norm. Every replica
// applies the update itself, so they must hold identical parameters after every step.
TEST_F(CudaTrainerTest, DataParallelTwoGpusMatchOne) {
  SKIP_WITHOUT_GPUS(2);
  const TrainingData data = synthetic_data();
  json c = tiny_config();
  c["steps"] = 20;
  c["batch"] = 16;
  c["lr"] = 3e-3;
  const ModelConfig mc = model_config_of(c, data);
  auto run = [&](int64_t devices, std::vector<double>* trace) {
    TrainConfig t = train_config_of(c);
    t.devices = devices;
    auto tr = std::make_unique<CudaTrainer>(mc, t, 0);
    const int64_t B = t.batch;
    std::vector<float> x(static_cast<size_t>(B * data.tokens * data.in_dim)), yv(static_cast<size_t>(B));
    std::vector<int32_t> yc(static_cast<size_t>(B));
    std::vector<int64_t> idx(static_cast<size_t>(B));
    for (int64_t s = 0; s < t.steps; ++s) {
      for (int64_t j = 0; j < B; ++j) idx[static_cast<size_t>(j)] = (s * B + j * 7) % data.n_train;
      data.fill(0, idx.data(), B, x.data(), yc.data(), yv.data());
      const TrainStepResult r = tr->step(x.data(), yc.data(), yv.data(), B, s, s == 0);
      EXPECT_TRUE(r.finite);
      trace->push_back(r.fwd.loss);
      trace->push_back(r.grad_norm);
    }
    return tr;
  };
  std::vector<double> l1, l2;
  auto one = run(1, &l1);
  auto two = run(2, &l2);
  ASSERT_EQ(two->devices(), 2);
  for (size_t s = 0; s < l1.size(); ++s) EXPECT_NEAR(l2[s], l1[s], 1e-5 * std::fabs(l1[s])) << "step " << s / 2;
  EXPECT_GT(l1.front() - l1[l1.size() - 2], 1e-2) << "the runs should move";
  const int64_t n = two->model().num_params();
  std::vector<float> p0(static_cast<size_t>(n)), p1(static_cast<size_t>(n));
  two->replica(0).get_params(p0.data());
  two->replica(1).get_params(p1.data());
  EXPECT_EQ(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)), 0) << "replicas drifted apart";
  // Whole cells: deterministic with NCCL, and resumable.
  json cell = tiny_config();
  cell["devices"] = 2;
  cell["steps"] = 12;
  const TaskOutput a = train_cell(cell, on("cuda"), data);
  expect_identical(a, train_cell(cell, on("cuda"), data));
  std::atomic<int> stop{0};
  TaskContext ck = on("cuda");
  ck.stop = &stop;
  ck.checkpoint_path = path("dp.ckpt");
  EXPECT_EQ(train_cell(cell, ck, synthetic_data([&](int64_t f) {
                         if (f == 5) stop = SIGUSR1;
                       }))
                .status,
            CellStatus::interrupted);
  stop = 0;
  expect_identical(a, train_cell(cell, ck, synthetic_data()));
}

TEST(CudaTrainerDevices, MoreDevicesThanVisibleIsAClearError) {
  SKIP_WITHOUT_GPUS(1);
  json c = tiny_config();
  c["devices"] = 2;
  TaskContext ctx;
  ctx.device = "cuda:" + std::to_string(cuda_device_count() - 1);  // the last GPU plus one that is not there
  try {
    train_cell(c, ctx, synthetic_data());
    ADD_FAILURE() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("visible"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
