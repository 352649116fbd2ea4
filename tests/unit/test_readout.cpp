// kernels/readout.h: the read-out in its own algebra against the generic path it replaces
// on the CPU (qkv of every token, then the attention kernels on the split heads), for every
// activation of the registry, several heads and prompt lengths; then whole cells trained
// through each path; then several cells in one call against each alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "experiments/icl_regression.h"
#include "experiments/rng.h"
#include "kernels/device.h"
#include "kernels/readout.h"
#include "worker/model/model.h"
#include "worker/training/train_cell.h"
#include "worker/training/trainer.h"
#ifdef ATTNSWEEP_HAVE_CUDA
#include "kernels/readout_cuda.h"
#include "worker/training/cuda_trainer.h"
#endif

namespace attnsweep {
namespace {

// Switches the read-out path for a scope (kernels/readout.h); the default comes back.
class AlgebraGuard {
 public:
  explicit AlgebraGuard(bool on) : saved_(readout_algebra_enabled()) { set_readout_algebra(on); }
  ~AlgebraGuard() { set_readout_algebra(saved_); }
  AlgebraGuard(const AlgebraGuard&) = delete;
  AlgebraGuard& operator=(const AlgebraGuard&) = delete;

 private:
  bool saved_;
};

// Every activation of the registry, with the degrees and scales the papers use.
std::vector<ActivationSpec> specs() {
  std::vector<ActivationSpec> out;
  for (const ActivationInfo& a : kActivations) {
    ActivationSpec s;
    s.activation = a.id;
    if (!a.takes_scale && !a.takes_degree) {
      out.push_back(s);
      continue;
    }
    for (ScaleKind sc : {ScaleKind::none, ScaleKind::inv_sqrt_n, ScaleKind::inv_n}) {
      s.scale = a.takes_scale ? sc : ScaleKind::none;
      for (int32_t p : a.takes_degree ? std::vector<int32_t>{1, 2, 3, 5} : std::vector<int32_t>{1}) {
        s.degree = p;
        out.push_back(s);
      }
      if (!a.takes_scale) break;
    }
  }
  return out;
}

std::string describe(const ActivationSpec& s, int64_t H, int64_t L) {
  return std::string(kActivations[static_cast<size_t>(s.activation)].name) + " p " + std::to_string(s.degree) +
         " scale " + std::to_string(static_cast<int>(s.scale)) + " H " + std::to_string(H) + " L " + std::to_string(L);
}

ModelConfig readout_model(int64_t L, int64_t C, int64_t H, const ActivationSpec& act) {
  ModelConfig mc;
  mc.head = Head::readout;
  mc.tokens = L + 1;
  mc.in_dim = mc.dim = C;
  mc.layers = 1;
  mc.heads = H;
  mc.classes = 0;
  mc.act = act;
  return mc;
}

struct Pass {
  double loss = 0;
  std::vector<float> pred, grads;
  std::vector<double> attn, jac;
};

// One forward and backward of a fresh model (Model: the CPU's; CudaModel: device 0's).
template <class M = Model>
Pass run_model(const ModelConfig& mc, bool algebra, const std::vector<float>& x, const std::vector<float>& y, int64_t B,
               uint64_t init_seed, double init_std) {
  AlgebraGuard g(algebra);
  M m(mc);
  m.init(init_seed, init_std);
  Pass p;
  const ForwardStats st = m.forward_backward(x.data(), nullptr, y.data(), B, true);
  p.loss = st.loss;
  p.attn = st.attn_fro;
  p.jac = st.jac_fro;
  std::vector<float> buf;
  const float* pred = m.host_predictions(buf);
  p.pred.assign(pred, pred + B);
  p.grads.resize(static_cast<size_t>(m.num_params()));
  m.get_grads(p.grads.data());
  return p;
}

// A batch of B prompts (L keys and the query, C wide: x [B, L + 1, C]) and targets y [B],
// standard normals drawn from rng, x first.
struct Batch {
  std::vector<float> x, y;
};
Batch random_batch(Rng& rng, int64_t B, int64_t L, int64_t C) {
  Batch b{std::vector<float>(static_cast<size_t>(B * (L + 1) * C)), std::vector<float>(static_cast<size_t>(B))};
  for (float& v : b.x) v = static_cast<float>(rng.normal());
  for (float& v : b.y) v = static_cast<float>(rng.normal());
  return b;
}

// ||a - b|| / ||b|| (0 when both are 0).
double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Float32 sums over a few hundred keys in two orders: 1e-5 relative is ~100 ulp, far
// above the rounding of either path and far below any error in the algebra (a wrong
// term changes the gradient by O(1) relative). Rounding errors of a sum grow like the
// square root of its length: beyond 300 keys the bound grows so (3.2e-5 at L = 3000,
// where the emulated device's CUDA path measured 1.5e-5 for sigmoid).
double tol_for(int64_t L) {
  return 1e-5 * std::max(1.0, std::sqrt(static_cast<double>(L) / 300.0));
}

// The algebra on model M (the CPU's or CUDA's) against the CPU's op sequence, for every
// activation, 1-3 heads and each prompt length of Ls. Returns the cases compared.
template <class M>
int compare_with_the_generic_path(const std::vector<int64_t>& Ls) {
  const int64_t C = 6, B = 9;  // B not a multiple of the CPU kernel's block of prompts
  int cases = 0;
  for (const ActivationSpec& act : specs())
    for (int64_t H : {1, 2, 3})
      for (int64_t L : Ls) {
        const ModelConfig mc = readout_model(L, C, H, act);
        Rng rng(seed_of({static_cast<uint64_t>(L), static_cast<uint64_t>(H), 11}));
        const auto [x, y] = random_batch(rng, B, L, C);
        const Pass want = run_model(mc, false, x, y, B, 3, 0.5);
        const Pass got = run_model<M>(mc, true, x, y, B, 3, 0.5);
        const std::string what = describe(act, H, L);
        const double kTol = tol_for(L);
        EXPECT_NEAR(got.loss, want.loss, kTol * std::abs(want.loss)) << what;
        EXPECT_LE(rel_l2(got.pred, want.pred), kTol) << what;
        EXPECT_LE(rel_l2(got.grads, want.grads), kTol) << what;
        double gnorm = 0;
        for (float g : want.grads) gnorm += static_cast<double>(g) * g;
        EXPECT_GT(gnorm, 0.0) << what << ": a gradient to compare";
        EXPECT_EQ(got.attn.size(), static_cast<size_t>(H)) << what;
        if (got.attn.size() != static_cast<size_t>(H)) continue;
        for (int64_t h = 0; h < H; ++h) {
          EXPECT_NEAR(got.attn[static_cast<size_t>(h)], want.attn[static_cast<size_t>(h)],
                      kTol * want.attn[static_cast<size_t>(h)])
              << what << " head " << h;
          EXPECT_NEAR(got.jac[static_cast<size_t>(h)], want.jac[static_cast<size_t>(h)],
                      kTol * want.jac[static_cast<size_t>(h)] + 1e-12)
              << what << " head " << h;
        }
        ++cases;
      }
  return cases;
}

TEST(ReadoutAlgebra, MatchesTheGenericPathForEveryActivation) {
  EXPECT_GT(compare_with_the_generic_path<Model>({1, 7, 40, 200}), 100);
}

TEST(ReadoutAlgebra, ForwardAloneAndBackwardAfterForwardGiveTheSameAsOnePass) {
  const int64_t C = 6, B = 5, L = 50;
  ActivationSpec act;  // softmax
  const ModelConfig mc = readout_model(L, C, 1, act);
  Rng rng(seed_of({7}));
  const auto [x, y] = random_batch(rng, B, L, C);
  const Pass one = run_model(mc, true, x, y, B, 1, 0.3);
  AlgebraGuard g(true);
  Model m(mc);
  m.init(1, 0.3);
  const ForwardStats st = m.forward(x.data(), nullptr, y.data(), B, true);
  m.backward();
  std::vector<float> grads(static_cast<size_t>(m.num_params()));
  m.get_grads(grads.data());
  EXPECT_EQ(st.loss, one.loss);
  EXPECT_EQ(st.attn_fro, one.attn);
  EXPECT_EQ(grads, one.grads);
}

// The cell of the paired grid at a CI budget: d = 5, L = 24, SGD at lr 0.1, batch 16.
json readout_cell(const std::string& activation) {
  json c = {{"task", "icl_regression"},
            {"activation", activation},
            {"degree", 1},
            {"scale", "inv_n"},
            {"prompt_length", 24},
            {"d", 5},
            {"rho", 0.5},
            {"noise_var", 0.1},
            {"seed", 2},
            {"init_seed", 1},
            {"init_std", 0.0},
            {"steps", 500},
            {"batch", 16},
            {"lr", 0.1},
            {"optimizer", "sgd"},
            {"lr_schedule", "constant"},
            {"warmup_steps", 0},
            {"clip", 0.0},
            {"weight_decay", 0.0},
            {"log_every", 50},
            {"eval_every", 100},
            {"eval_batches", 0},
            {"checkpoint_every", 0},
            {"train_prompts", 65536},
            {"test_prompts", 128},
            {"devices", 1}};
  return c;
}

std::vector<float> series_f(const TaskOutput& o, const std::string& path) {
  for (const auto& s : o.series)
    if (s.path == path) return std::get<std::vector<float>>(s.data);
  return {};
}

// 500 SGD steps: both paths see the same batches and start from the same weights; their
// rounding differs (~1e-7 a step), which plain SGD on this smooth loss neither amplifies
// nor lets drift far: the losses agree to 1e-4 relative at every logged step, the final
// test MSE and limit error to 1e-4.
TEST(ReadoutAlgebra, FiveHundredStepsTrackTheGenericPath) {
  for (const std::string act : {"softmax", "poly"}) {
    TaskContext ctx;
    ctx.train = train_cell;
    TaskOutput want, got;
    {
      AlgebraGuard g(false);
      want = run_icl_regression(readout_cell(act), ctx);
    }
    {
      AlgebraGuard g(true);
      got = run_icl_regression(readout_cell(act), ctx);
    }
    ASSERT_EQ(got.status, CellStatus::complete);
    const std::vector<float> lw = series_f(want, "/train/loss"), lg = series_f(got, "/train/loss");
    ASSERT_EQ(lw.size(), lg.size());
    ASSERT_GE(lw.size(), 10u);
    for (size_t i = 0; i < lw.size(); ++i) EXPECT_NEAR(lg[i], lw[i], 1e-4 * std::abs(lw[i])) << act << " log " << i;
    EXPECT_LT(lw.back(), lw.front()) << act << ": it learned";
    for (const char* k : {"test_mse", "limit_sq_error"})
      EXPECT_NEAR(got.final_metrics.at(k), want.final_metrics.at(k), 1e-4 * std::abs(want.final_metrics.at(k)))
          << act << " " << k;
  }
}

// Several cells in one call: each gets the bits it gets alone, whatever else is in the call.
TEST(ReadoutAlgebra, CellsInOneCallGetWhatEachGetsAlone) {
  const int64_t C = 6, B = 13, L = 64, H = 1;
  const ReadoutShape sh{B, L + 1, C, H};
  Rng rng(seed_of({5}));
  const auto [x, y] = random_batch(rng, B, L, C);
  const std::vector<ActivationSpec> acts = specs();
  const size_t K = acts.size();
  std::vector<std::vector<float>> w(K), grad(K), pred(K), grad1(K), pred1(K);
  std::vector<std::vector<double>> nrm(K), nrm1(K);
  std::vector<ReadoutCell> cells(K);
  for (size_t k = 0; k < K; ++k) {
    w[k].resize(static_cast<size_t>(3 * C * C));
    for (float& v : w[k]) v = static_cast<float>(0.4 * rng.normal());
    grad[k].resize(w[k].size());
    grad1[k].resize(w[k].size());
    pred[k].resize(static_cast<size_t>(B));
    pred1[k].resize(static_cast<size_t>(B));
    nrm[k].resize(static_cast<size_t>(2 * B * H));
    nrm1[k].resize(static_cast<size_t>(2 * B * H));
    cells[k] = ReadoutCell{w[k].data(), acts[k], pred[k].data(), grad[k].data(), nrm[k].data(), nrm[k].data() + B * H};
  }
  readout_train_cpu(sh, x.data(), y.data(), cells, true);
  for (size_t k = 0; k < K; ++k) {
    ReadoutCell alone{w[k].data(), acts[k], pred1[k].data(), grad1[k].data(), nrm1[k].data(), nrm1[k].data() + B * H};
    readout_train_cpu(sh, x.data(), y.data(), std::span<ReadoutCell>(&alone, 1), true);
    const std::string what = describe(acts[k], H, L);
    EXPECT_EQ(alone.loss, cells[k].loss) << what;
    EXPECT_EQ(grad1[k], grad[k]) << what;
    EXPECT_EQ(pred1[k], pred[k]) << what;
    EXPECT_EQ(nrm1[k], nrm[k]) << what;
  }
}

#ifdef ATTNSWEEP_HAVE_CUDA
// ---- the same algebra on CUDA (kernels/readout_cuda.h); SKIPPED without a GPU ----------

#define SKIP_WITHOUT_GPU() \
  if (cuda_device_count() < 1) GTEST_SKIP() << "no CUDA device"

// Against the CPU's op sequence, as the CPU's algebra is: the same float32 math, summed in
// other orders (each thread's keys, the warps, then the 8 warps in order), so the same
// 1e-5. L 1000 and 3000 give each of the 256 threads several keys.
TEST(ReadoutAlgebraCuda, MatchesTheGenericPathForEveryActivation) {
  SKIP_WITHOUT_GPU();
  EXPECT_GT(compare_with_the_generic_path<CudaModel>({1, 7, 40, 200, 1000, 3000}), 100);
}

// Device copies of the host vectors of one call.
struct DeviceCall {
  std::vector<DeviceBytes> bufs;
  template <class T>
  T* put(const std::vector<T>& host) {
    bufs.emplace_back();
    bufs.back().assign(0, host.size() * sizeof(T));
    cuda_check(cudaMemcpy(bufs.back().get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "copy in");
    return static_cast<T*>(bufs.back().get());
  }
  template <class T>
  static std::vector<T> get(const T* dev, size_t n) {
    std::vector<T> host(n);
    cuda_check(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), "copy out");
    return host;
  }
};

// Several cells in one launch, every activation of the registry: each gets the bits it
// gets alone (the fused groups' premise on a GPU), and a second run the same bits again.
TEST(ReadoutAlgebraCuda, CellsInOneCallGetWhatEachGetsAlone) {
  SKIP_WITHOUT_GPU();
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  const int64_t C = 6, B = 13, L = 300, H = 2;
  const ReadoutShape sh{B, L + 1, C, H};
  Rng rng(seed_of({5}));
  const auto [x, y] = random_batch(rng, B, L, C);
  std::vector<ActivationSpec> acts = specs();
  acts.resize(std::min<size_t>(acts.size(), kReadoutCudaMaxCells));
  const size_t K = acts.size(), G = static_cast<size_t>(3 * C * C);
  DeviceCall dev;
  const float* xd = dev.put(x);
  const float* yd = dev.put(y);
  AttentionCudaWorkspace* ws = attention_cuda_workspace_create();
  // One call of cells [first, first + n) with fresh outputs; returns grads, preds, norms.
  struct Out {
    std::vector<float> grad, pred;
    std::vector<double> nrm;
    double loss;
  };
  std::vector<std::vector<float>> w(K);
  for (auto& wk : w) {
    wk.resize(G);
    for (float& v : wk) v = static_cast<float>(0.4 * rng.normal());
  }
  auto call = [&](size_t first, size_t n) {
    std::vector<ReadoutCell> cells(n);
    std::vector<float*> g(n), p(n);
    std::vector<double*> nr(n);
    for (size_t i = 0; i < n; ++i) {
      const size_t k = first + i;
      g[i] = dev.put(std::vector<float>(G, 7.0f));  // overwritten
      p[i] = dev.put(std::vector<float>(static_cast<size_t>(B), 0.0f));
      nr[i] = dev.put(std::vector<double>(static_cast<size_t>(2 * B * H), 0.0));
      cells[i] = ReadoutCell{dev.put(w[k]), acts[k], p[i], g[i], nr[i], nr[i] + B * H};
    }
    readout_cuda(sh, xd, yd, cells.data(), static_cast<int64_t>(n), true, true, nullptr, ws, nullptr);
    std::vector<Out> out(n);
    for (size_t i = 0; i < n; ++i)
      out[i] = Out{DeviceCall::get(g[i], G), DeviceCall::get(p[i], static_cast<size_t>(B)),
                   DeviceCall::get(nr[i], static_cast<size_t>(2 * B * H)), cells[i].loss};
    return out;
  };
  const std::vector<Out> all = call(0, K), again = call(0, K);
  for (size_t k = 0; k < K; ++k) {
    const Out alone = call(k, 1)[0];
    const std::string what = describe(acts[k], H, L);
    EXPECT_EQ(alone.loss, all[k].loss) << what;
    EXPECT_EQ(alone.grad, all[k].grad) << what;
    EXPECT_EQ(alone.pred, all[k].pred) << what;
    EXPECT_EQ(alone.nrm, all[k].nrm) << what;
    EXPECT_EQ(again[k].grad, all[k].grad) << what << ": a second run";
    EXPECT_TRUE(std::isfinite(all[k].loss) && all[k].loss > 0) << what;
  }
  attention_cuda_workspace_destroy(ws);
}
#endif  // ATTNSWEEP_HAVE_CUDA

}  // namespace
}  // namespace attnsweep
