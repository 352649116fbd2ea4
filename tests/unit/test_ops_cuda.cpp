// The CUDA backend of kernels/ops.h (ops_cuda.h) against the CPU ops on the same inputs
// (the CPU ops are themselves checked against float64 references in test_ops.cpp), over
// shapes that hit the launchers' edges: 1, 7, 33, 129, 1025 rows / columns (one warp,
// partial warps, partial 32-column slabs, several 8-row blocks, several 1024-token
// tiles), plus a few large cases for the grid-stride loops and the chunk caps. Every
// output buffer carries guard bytes that must survive (out-of-bounds writes); outputs
// are checked for NaN/Inf first; a failure names the op and its full shape. Gradients
// start from random nonzero values on both sides, so "adds into" is checked too.
// Finally two runs of every reducing op must give the same bits.
// Every test needs a GPU and reports SKIPPED without one (never passes vacuously).
#ifdef ATTNSWEEP_HAVE_CUDA

#include "kernels/attention_cuda.h"
#include "kernels/model_ops.h"
#include "kernels/model_ops_cuda.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnsweep {
namespace {

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_DEVICE() \
  if (!have_device()) GTEST_SKIP() << "no CUDA device"

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Device copy of a host vector with kGuard guard elements after it, set to a byte pattern
// that download() checks (an op writing past its output clobbers them).
constexpr size_t kGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;

template <class T>
class Dev {
 public:
  explicit Dev(const std::vector<T>& host) : n_(host.size()) {
    check(cudaMalloc(&p_, (n_ + kGuard) * sizeof(T)), "cudaMalloc");
    if (n_) check(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
    check(cudaMemset(get() + n_, kGuardByte, kGuard * sizeof(T)), "guard");
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() { cudaFree(p_); }
  T* get() const { return static_cast<T*>(p_); }
  // The data; fails the test if a guard byte changed.
  std::vector<T> download(const std::string& what) const {
    check(cudaDeviceSynchronize(), "kernel");
    std::vector<T> h(n_ + kGuard);
    check(cudaMemcpy(h.data(), p_, (n_ + kGuard) * sizeof(T), cudaMemcpyDeviceToHost), "download");
    const auto* g = reinterpret_cast<const unsigned char*>(h.data() + n_);
    for (size_t i = 0; i < kGuard * sizeof(T); ++i)
      if (g[i] != kGuardByte) {
        ADD_FAILURE() << what << ": out-of-bounds write at guard byte " << i;
        break;
      }
    h.resize(n_);
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t n_;
};

using Workspace = std::unique_ptr<AttentionCudaWorkspace, void (*)(AttentionCudaWorkspace*)>;
Workspace make_workspace() {
  return Workspace(attention_cuda_workspace_create(), attention_cuda_workspace_destroy);
}

using FVec = std::vector<float>;

FVec randn(size_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  FVec x(n);
  for (auto& e : x) e = nd(rng);
  return x;
}

FVec zeros(int64_t n) {
  return FVec(static_cast<size_t>(n), 0.0f);
}

std::vector<int32_t> randint(size_t n, int32_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, hi - 1);
  std::vector<int32_t> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

// Tolerances, relative to the largest |entry| of the CPU tensor (max-abs error):
// - kTolGemm: cuBLAS and OpenBLAS sum the K <= 1025 (20000 for one dweight) products in
//   different orders; each float32 dot product carries a random-walk rounding error of
//   about eps sqrt(K) |result| (2e-6 at K = 1025, 8e-6 at K = 20000). 5e-5 leaves margin;
//   an indexing or transpose bug gives errors of order 1.
// - kTolUlp: the two sides evaluate the same expression but may differ by one or two
//   float32 roundings (nvcc contracts a*b+c into an FMA; float(double) of sums taken in
//   another order): a few ulp, 6e-8 each. 1e-6 is about 16 ulp.
// - kTolGeluGrad: tanhf is within 2 ulp on the GPU; sech^2 = 1 - tanh^2 turns that into
//   ~2.4e-7 absolute, multiplied by up to ~3 in the derivative.
// - kTolLoss: float64 sums of <= 3e6 terms in another order, and CUDA's exp/log against
//   glibc's (1 ulp in float64): ~1e-13 relative. 1e-10 still catches a wrong term.
// - exact: copies, single additions and scatter-adds in the CPU's order are bit-identical.
constexpr double kTolGemm = 5e-5;
constexpr double kTolUlp = 1e-6;
constexpr double kTolGeluGrad = 1e-5;
constexpr double kTolLoss = 1e-10;

void expect_close(const std::string& what, const FVec& got, const FVec& want, double tol, double floor = 0.0) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, tol * std::max(scale, 1e-30))
      << what << ": worst at [" << at << "] got " << (got.empty() ? 0.f : got[at]) << " want "
      << (want.empty() ? 0.f : want[at]) << ", scale " << scale;
}

void expect_equal(const std::string& what, const FVec& got, const FVec& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": first difference at [" << i << "] got " << got[i] << " want " << want[i];
      return;
    }
}

void expect_loss_close(const std::string& what, double got, double want) {
  ASSERT_TRUE(std::isfinite(got)) << what << " = " << got;
  EXPECT_LE(std::fabs(got - want), kTolLoss * std::max(1.0, std::fabs(want)))
      << what << ": got " << got << " want " << want;
}

const int64_t kSizes[] = {1, 7, 33, 129, 1025};

std::string shape_str(const char* op, std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::ostringstream s;
  s << op;
  for (const auto& [k, v] : dims) s << " " << k << "=" << v;
  return s.str();
}

// ---- matmul ---------------------------------------------------------------------------

void run_matmul_case(int64_t N, int64_t C, int64_t OC, bool bias, bool want_dinp, bool want_dbias, uint32_t seed,
                     AttentionCudaWorkspace* ws) {
  const std::string what =
      shape_str("matmul", {{"N", N}, {"C", C}, {"OC", OC}, {"bias", bias}, {"dinp", want_dinp}, {"dbias", want_dbias}});
  SCOPED_TRACE(what);
  const FVec inp = randn(N * C, seed), w = randn(OC * C, seed + 1, 0.3f), b = randn(OC, seed + 2);
  const FVec dout = randn(N * OC, seed + 3), dinp0 = randn(N * C, seed + 4), dw0 = randn(OC * C, seed + 5),
             db0 = randn(OC, seed + 6);
  FVec out(N * OC), dinp = dinp0, dw = dw0, db = db0;
  matmul_forward(out.data(), inp.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
  matmul_backward(want_dinp ? dinp.data() : nullptr, dw.data(), want_dbias ? db.data() : nullptr, dout.data(),
                  inp.data(), w.data(), N, C, OC);

  Dev<float> g_inp(inp), g_w(w), g_b(b), g_dout(dout), g_out(zeros(N * OC)), g_dinp(dinp0), g_dw(dw0), g_db(db0);
  matmul_forward_cuda(g_out.get(), g_inp.get(), g_w.get(), bias ? g_b.get() : nullptr, N, C, OC, ws, nullptr);
  matmul_backward_cuda(want_dinp ? g_dinp.get() : nullptr, g_dw.get(), want_dbias ? g_db.get() : nullptr, g_dout.get(),
                       g_inp.get(), g_w.get(), N, C, OC, ws, nullptr);
  expect_close(what + " out", g_out.download(what + " out"), out, kTolGemm);
  expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolGemm);  // == dinp0 when not wanted
  expect_close(what + " dweight", g_dw.download(what + " dweight"), dw, kTolGemm);
  // dbias: float64 column sums on both sides, one float rounding each.
  expect_close(what + " dbias", g_db.download(what + " dbias"), db, kTolUlp);
}

TEST(OpsCuda, MatmulMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  uint32_t k = 0;
  for (int64_t N : kSizes)
    for (int64_t C : kSizes)
      for (int64_t OC : kSizes) {
        ++k;
        run_matmul_case(N, C, OC, k % 2 == 0, k % 3 != 0, k % 4 != 0, 100 * k, ws.get());
      }
  // 20000 rows: more than 256 chunks of 64 rows, so the dbias chunk cap applies and
  // each colsum lane sums several rows.
  run_matmul_case(20000, 7, 33, true, true, true, 7, ws.get());
}

// ---- layernorm ------------------------------------------------------------------------

void run_layernorm_case(int64_t N, int64_t C, uint32_t seed, AttentionCudaWorkspace* ws) {
  const std::string what = shape_str("layernorm", {{"N", N}, {"C", C}});
  SCOPED_TRACE(what);
  FVec inp = randn(N * C, seed, 2.0f);
  for (int64_t i = 0; i < N * C; ++i) inp[i] += static_cast<float>(i / C % 5);  // row means away from 0
  const FVec w = randn(C, seed + 1), b = randn(C, seed + 2), dout = randn(N * C, seed + 3);
  const FVec dinp0 = randn(N * C, seed + 4), dw0 = randn(C, seed + 5), db0 = randn(C, seed + 6);
  FVec out(N * C), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
  layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(), N,
                     C);

  Dev<float> g_inp(inp), g_w(w), g_b(b), g_dout(dout), g_out(zeros(N * C)), g_mean(zeros(N)), g_rstd(zeros(N)),
      g_dinp(dinp0), g_dw(dw0), g_db(db0);
  layernorm_forward_cuda(g_out.get(), g_mean.get(), g_rstd.get(), g_inp.get(), g_w.get(), g_b.get(), N, C, nullptr);
  // The backward reads the GPU's own mean/rstd, as a trainer would.
  layernorm_backward_cuda(g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(), g_w.get(), g_mean.get(),
                          g_rstd.get(), N, C, ws, nullptr);
  // Everything below is float64 arithmetic rounded once or twice to float32.
  expect_close(what + " out", g_out.download(what + " out"), out, kTolUlp);
  expect_close(what + " mean", g_mean.download(what + " mean"), mean, kTolUlp);
  expect_close(what + " rstd", g_rstd.download(what + " rstd"), rstd, kTolUlp);
  expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolUlp);
  expect_close(what + " dweight", g_dw.download(what + " dweight"), dw, kTolUlp);
  expect_close(what + " dbias", g_db.download(what + " dbias"), db, kTolUlp);
}

TEST(OpsCuda, LayernormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  uint32_t k = 0;
  for (int64_t N : kSizes)
    for (int64_t C : kSizes) run_layernorm_case(N, C, 1000 + 10 * (++k), ws.get());
  run_layernorm_case(20000, 129, 3, ws.get());  // chunk cap of the two-output colsum
  run_layernorm_case(2, 20000, 5, ws.get());    // long rows: 625 elements per lane
}

// ---- element-wise ---------------------------------------------------------------------

// 65536 blocks x 256 threads = 2^24 is the launch cap: beyond it the grid-stride loop turns.
const int64_t kElementwiseSizes[] = {1, 7, 33, 129, 1025, (int64_t{1} << 24) + 1025};

TEST(OpsCuda, GeluMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("gelu", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec inp = randn(n, 11, 3.0f), dout = randn(n, 12), dinp0 = randn(n, 13);
    FVec out(n), dinp = dinp0;
    gelu_forward(out.data(), inp.data(), n);
    gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    Dev<float> g_inp(inp), g_dout(dout), g_out(zeros(n)), g_dinp(dinp0);
    gelu_forward_cuda(g_out.get(), g_inp.get(), n, nullptr);
    gelu_backward_cuda(g_dinp.get(), g_inp.get(), g_dout.get(), n, nullptr);
    // |gelu(x)| <= |x|, and in the left tail 0.5 x (1 + tanh u) cancels: the rounding of
    // tanh near -1 (an ulp of 1) is multiplied by |x|, so errors scale with max |x|, not
    // with max |gelu(x)| (a single x = -3.4 gives gelu = -3e-5 but an error of ~1e-8).
    double xmax = 0.0;
    for (float x : inp) xmax = std::max(xmax, std::fabs(static_cast<double>(x)));
    expect_close(what + " out", g_out.download(what + " out"), out, kTolUlp, xmax);
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolGeluGrad);
  }
}

TEST(OpsCuda, ResidualMatchesCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("residual", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec a = randn(n, 21), b = randn(n, 22), dout = randn(n, 23), d10 = randn(n, 24), d20 = randn(n, 25);
    FVec out(n), d1 = d10, d2 = d20;
    residual_forward(out.data(), a.data(), b.data(), n);
    residual_backward(d1.data(), d2.data(), dout.data(), n);
    Dev<float> g_a(a), g_b(b), g_dout(dout), g_out(zeros(n)), g_d1(d10), g_d2(d20);
    residual_forward_cuda(g_out.get(), g_a.get(), g_b.get(), n, nullptr);
    residual_backward_cuda(g_d1.get(), g_d2.get(), g_dout.get(), n, nullptr);
    expect_equal(what + " out", g_out.download(what + " out"), out);  // one float addition each
    expect_equal(what + " dinp1", g_d1.download(what + " dinp1"), d1);
    expect_equal(what + " dinp2", g_d2.download(what + " dinp2"), d2);
  }
}

TEST(OpsCuda, MeanpoolMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto one = [](int64_t B, int64_t T, int64_t C) {
    const std::string what = shape_str("meanpool", {{"B", B}, {"T", T}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec inp = randn(B * T * C, 31), dout = randn(B * C, 32), dinp0 = randn(B * T * C, 33);
    FVec out(B * C), dinp = dinp0;
    meanpool_forward(out.data(), inp.data(), B, T, C);
    meanpool_backward(dinp.data(), dout.data(), B, T, C);
    Dev<float> g_inp(inp), g_dout(dout), g_out(zeros(B * C)), g_dinp(dinp0);
    meanpool_forward_cuda(g_out.get(), g_inp.get(), B, T, C, nullptr);
    meanpool_backward_cuda(g_dinp.get(), g_dout.get(), B, T, C, nullptr);
    // Forward: the same float64 sum in the same order (one rounding); backward: dout * inv
    // + dinp may be one FMA on the GPU.
    // |gelu(x)| <= |x|, and in the left tail 0.5 x (1 + tanh u) cancels: the rounding of
    // tanh near -1 (an ulp of 1) is multiplied by |x|, so errors scale with max |x|, not
    // with max |gelu(x)| (a single x = -3.4 gives gelu = -3e-5 but an error of ~1e-8).
    double xmax = 0.0;
    for (float x : inp) xmax = std::max(xmax, std::fabs(static_cast<double>(x)));
    expect_close(what + " out", g_out.download(what + " out"), out, kTolUlp, xmax);
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolUlp);
  };
  for (int64_t B : {1, 7})
    for (int64_t T : kSizes)
      for (int64_t C : kSizes) one(B, T, C);
  one(33, 7, 129);
}

// ---- losses -----------------------------------------------------------------------------

void run_xent_case(int64_t N, int64_t V, bool integer_logits, AttentionCudaWorkspace* ws) {
  const std::string what = shape_str("softmax_xent", {{"N", N}, {"V", V}, {"integer_logits", integer_logits}});
  SCOPED_TRACE(what);
  FVec logits = randn(N * V, static_cast<uint32_t>(N * 7 + V), 2.0f);
  // Integer logits tie often: the first maximum must win on both sides.
  if (integer_logits)
    for (auto& x : logits) x = std::round(x);
  std::vector<int32_t> targets = randint(N, static_cast<int32_t>(V), static_cast<uint32_t>(N + V));
  for (int64_t i = 0; i < N; i += 2)  // every other row: the target is a (first or later) maximum
    targets[i] = static_cast<int32_t>(std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) -
                                      (logits.begin() + i * V));
  for (int64_t i = 1; i < N; i += 4) {  // and sometimes the last maximum, which counts only if unique
    int64_t last = 0;
    for (int64_t j = 0; j < V; ++j)
      if (logits[i * V + j] >= logits[i * V + last]) last = j;
    targets[i] = static_cast<int32_t>(last);
  }
  const FVec dl0 = randn(N * V, 41);
  const float dloss = 0.7f;
  FVec probs(N * V), dl = dl0;
  int64_t correct = -1;
  const double loss = softmax_crossentropy_forward(probs.data(), &correct, logits.data(), targets.data(), N, V);
  softmax_crossentropy_backward(dl.data(), probs.data(), targets.data(), dloss, N, V);

  Dev<float> g_logits(logits), g_probs(zeros(N * V)), g_dl(dl0);
  Dev<int32_t> g_targets(targets);
  int64_t g_correct = -1;
  const double g_loss =
      softmax_crossentropy_forward_cuda(g_probs.get(), &g_correct, g_logits.get(), g_targets.get(), N, V, ws, nullptr);
  softmax_crossentropy_backward_cuda(g_dl.get(), g_probs.get(), g_targets.get(), dloss, N, V, nullptr);
  expect_loss_close(what + " loss", g_loss, loss);
  EXPECT_EQ(g_correct, correct) << what << " n_correct";
  // probs: float(exp(x - max) / z) in float64 on both sides; dlogits: one FMA apart.
  expect_close(what + " probs", g_probs.download(what + " probs"), probs, kTolUlp);
  expect_close(what + " dlogits", g_dl.download(what + " dlogits"), dl, kTolUlp);
  // n_correct may be null.
  EXPECT_NO_THROW(
      softmax_crossentropy_forward_cuda(g_probs.get(), nullptr, g_logits.get(), g_targets.get(), N, V, ws, nullptr));
}

TEST(OpsCuda, SoftmaxCrossEntropyMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for (int64_t N : kSizes)
    for (int64_t V : kSizes) run_xent_case(N, V, V % 2 == 1 && N > 7, ws.get());
  for (int64_t V : {7, 129, 1025}) run_xent_case(129, V, true, ws.get());
  run_xent_case(3, 50257, false, ws.get());  // a GPT-2 vocabulary: 1571 columns per lane
}

TEST(OpsCuda, MseMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  // 3e6 > 1024 blocks x 2048: the partial-count cap applies.
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{33}, int64_t{129}, int64_t{1025}, int64_t{3000001}}) {
    const std::string what = shape_str("mse", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec pred = randn(n, 51), target = randn(n, 52), d0 = randn(n, 53);
    const float dloss = 1.3f;
    FVec d = d0;
    const double loss = mse_forward(pred.data(), target.data(), n);
    mse_backward(d.data(), pred.data(), target.data(), dloss, n);
    Dev<float> g_pred(pred), g_target(target), g_d(d0);
    const double g_loss = mse_forward_cuda(g_pred.get(), g_target.get(), n, ws.get(), nullptr);
    mse_backward_cuda(g_d.get(), g_pred.get(), g_target.get(), dloss, n, nullptr);
    expect_loss_close(what + " loss", g_loss, loss);
    expect_close(what + " dpred", g_d.download(what + " dpred"), d, kTolUlp);  // one FMA apart
  }
}

// ---- embeddings, patchify -----------------------------------------------------------------

void run_embedding_case(int64_t B, int64_t T, int64_t C, int32_t V, bool use_wpe, bool use_dwte) {
  const std::string what =
      shape_str("embedding", {{"B", B}, {"T", T}, {"C", C}, {"V", V}, {"wpe", use_wpe}, {"dwte", use_dwte}});
  SCOPED_TRACE(what);
  const std::vector<int32_t> ids = randint(B * T, V, static_cast<uint32_t>(B * 1000 + T + C));
  const FVec wte = randn(V * C, 61), wpe = randn(T * C, 62), dout = randn(B * T * C, 63);
  const FVec dwte0 = randn(V * C, 64), dwpe0 = randn(T * C, 65);
  FVec out(B * T * C), dwte = dwte0, dwpe = dwpe0;
  embedding_forward(out.data(), ids.data(), wte.data(), use_wpe ? wpe.data() : nullptr, B, T, C);
  embedding_backward(use_dwte ? dwte.data() : nullptr, use_wpe ? dwpe.data() : nullptr, dout.data(), ids.data(), B, T,
                     C);
  Dev<int32_t> g_ids(ids);
  Dev<float> g_wte(wte), g_wpe(wpe), g_dout(dout), g_out(zeros(B * T * C)), g_dwte(dwte0), g_dwpe(dwpe0);
  embedding_forward_cuda(g_out.get(), g_ids.get(), g_wte.get(), use_wpe ? g_wpe.get() : nullptr, B, T, C, nullptr);
  embedding_backward_cuda(use_dwte ? g_dwte.get() : nullptr, use_wpe ? g_dwpe.get() : nullptr, g_dout.get(),
                          g_ids.get(), B, T, C, nullptr);
  // One addition per output; scatter-adds in token order, as the CPU: bit-identical.
  expect_equal(what + " out", g_out.download(what + " out"), out);
  expect_equal(what + " dwte", g_dwte.download(what + " dwte"), dwte);
  expect_equal(what + " dwpe", g_dwpe.download(what + " dwpe"), dwpe);
}

TEST(OpsCuda, EmbeddingMatchesCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  uint32_t k = 0;
  for (int64_t T : {1, 33, 129})
    for (int64_t C : kSizes)
      for (int32_t V : {1, 5, 1025}) {  // V = 1: every token hits the same row
        ++k;
        run_embedding_case(k % 2 ? 1 : 7, T, C, V, k % 3 != 0, k % 5 != 0);
      }
  run_embedding_case(2, 1025, 129, 50, true, true);  // 2050 tokens: three 1024-id tiles
  run_embedding_case(3, 7, 1025, 1025, true, true);  // C > 128: several column blocks
}

TEST(OpsCuda, PatchifyMatchesCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  struct P {
    int64_t B, Cin, Hh, W, p;
  };
  for (const P& c :
       {P{1, 1, 7, 7, 1}, P{3, 1, 7, 49, 7}, P{2, 3, 32, 32, 4}, P{1, 3, 33, 66, 33}, P{2, 3, 224, 224, 16}}) {
    const std::string what = shape_str("patchify", {{"B", c.B}, {"Cin", c.Cin}, {"H", c.Hh}, {"W", c.W}, {"p", c.p}});
    SCOPED_TRACE(what);
    const int64_t n = c.B * c.Cin * c.Hh * c.W;  // patches have as many elements as the image
    const FVec img = randn(n, 71);
    FVec patches(n);
    patchify(patches.data(), img.data(), c.B, c.Cin, c.Hh, c.W, c.p);
    Dev<float> g_img(img), g_patches(zeros(n));
    patchify_cuda(g_patches.get(), g_img.get(), c.B, c.Cin, c.Hh, c.W, c.p, nullptr);
    expect_equal(what, g_patches.download(what), patches);
  }
}

// ---- optimizers -------------------------------------------------------------------------------

TEST(OpsCuda, AdamWMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("adamw", {{"n", n}});
    SCOPED_TRACE(what);
    FVec p = randn(n, 81), m(n, 0.0f), v(n, 0.0f);
    Dev<float> g_p(p), g_m(m), g_v(v);
    for (int64_t t = 1; t <= 3; ++t) {
      const FVec g = randn(n, static_cast<uint32_t>(82 + t));
      adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t);
      Dev<float> g_g(g);
      adamw_update_cuda(g_p.get(), g_g.get(), g_m.get(), g_v.get(), n, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, t, nullptr);
      check(cudaDeviceSynchronize(), "adamw");
    }
    // m and v: beta m + (1 - beta) g may be an FMA on the GPU (1 ulp per step); params
    // move by ~lr per step, so their error is far below an ulp of the parameter.
    expect_close(what + " params", g_p.download(what + " params"), p, kTolUlp);
    expect_close(what + " m", g_m.download(what + " m"), m, kTolUlp);
    expect_close(what + " v", g_v.download(what + " v"), v, kTolUlp);
  }
}

TEST(OpsCuda, SgdMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes)
    for (float momentum : {0.0f, 0.9f})
      for (float wd : {0.0f, 1e-4f}) {
        const std::string what = shape_str("sgd", {{"n", n}, {"momentum>0", momentum > 0}, {"wd>0", wd > 0}});
        SCOPED_TRACE(what);
        FVec p = randn(n, 91), buf(n, 0.0f);
        Dev<float> g_p(p), g_buf(buf);
        for (int t = 1; t <= 3; ++t) {
          const FVec g = randn(n, static_cast<uint32_t>(92 + t));
          sgd_update(p.data(), g.data(), momentum > 0 ? buf.data() : nullptr, n, 0.1f, momentum, wd);
          Dev<float> g_g(g);
          sgd_update_cuda(g_p.get(), g_g.get(), momentum > 0 ? g_buf.get() : nullptr, n, 0.1f, momentum, wd, nullptr);
          check(cudaDeviceSynchronize(), "sgd");
        }
        // g + wd p and momentum buf + g may each be one FMA on the GPU.
        expect_close(what + " params", g_p.download(what + " params"), p, kTolUlp);
        expect_close(what + " buf", g_buf.download(what + " buf"), buf, kTolUlp);
      }
}

// ---- determinism --------------------------------------------------------------------------------

// Every op that reduces (dbias, layernorm's dweight/dbias, the losses, the embedding
// scatter) run twice from the same state on large shapes, through a fresh workspace and
// a non-default stream the second time: the bits must agree.
struct ReduceRun {
  std::vector<float> dinp, dweight, dbias, ln_dinp, ln_dw, ln_db, probs, dwte, dwpe;
  double xent = 0, mse = 0;
  int64_t correct = 0;
};

ReduceRun reduce_run(cudaStream_t stream) {
  auto ws = make_workspace();
  ReduceRun r;
  {
    const int64_t N = 4099, C = 129, OC = 1025;
    Dev<float> inp(randn(N * C, 1)), w(randn(OC * C, 2)), dout(randn(N * OC, 3)), dinp(randn(N * C, 4)),
        dw(randn(OC * C, 5)), db(randn(OC, 6));
    matmul_backward_cuda(dinp.get(), dw.get(), db.get(), dout.get(), inp.get(), w.get(), N, C, OC, ws.get(), stream);
    r.dinp = dinp.download("dinp");
    r.dweight = dw.download("dweight");
    r.dbias = db.download("dbias");
  }
  {
    const int64_t N = 20000, C = 129;
    Dev<float> inp(randn(N * C, 11)), w(randn(C, 12)), b(randn(C, 13)), dout(randn(N * C, 14)), out(zeros(N * C)),
        mean(zeros(N)), rstd(zeros(N)), dinp(zeros(N * C)), dw(zeros(C)), db(zeros(C));
    layernorm_forward_cuda(out.get(), mean.get(), rstd.get(), inp.get(), w.get(), b.get(), N, C, stream);
    layernorm_backward_cuda(dinp.get(), dw.get(), db.get(), dout.get(), inp.get(), w.get(), mean.get(), rstd.get(), N,
                            C, ws.get(), stream);
    r.ln_dinp = dinp.download("ln dinp");
    r.ln_dw = dw.download("ln dweight");
    r.ln_db = db.download("ln dbias");
  }
  {
    const int64_t N = 1025, V = 1025;
    Dev<float> logits(randn(N * V, 21, 3.0f)), probs(zeros(N * V));
    Dev<int32_t> targets(randint(N, V, 22));
    r.xent =
        softmax_crossentropy_forward_cuda(probs.get(), &r.correct, logits.get(), targets.get(), N, V, ws.get(), stream);
    r.probs = probs.download("probs");
  }
  {
    const int64_t n = 3000001;
    Dev<float> pred(randn(n, 31)), target(randn(n, 32));
    r.mse = mse_forward_cuda(pred.get(), target.get(), n, ws.get(), stream);
  }
  {
    const int64_t B = 8, T = 512, C = 129;
    Dev<int32_t> ids(randint(B * T, 50, 41));
    Dev<float> dout(randn(B * T * C, 42)), dwte(zeros(50 * C)), dwpe(zeros(T * C));
    embedding_backward_cuda(dwte.get(), dwpe.get(), dout.get(), ids.get(), B, T, C, stream);
    r.dwte = dwte.download("dwte");
    r.dwpe = dwpe.download("dwpe");
  }
  return r;
}

TEST(OpsCudaDeterminism, ReductionsBitIdentical) {
  SKIP_WITHOUT_DEVICE();
  const ReduceRun a = reduce_run(nullptr);
  cudaStream_t s = nullptr;
  check(cudaStreamCreate(&s), "cudaStreamCreate");
  const ReduceRun b = reduce_run(s);
  check(cudaStreamDestroy(s), "cudaStreamDestroy");
  expect_equal("matmul dinp", b.dinp, a.dinp);
  expect_equal("matmul dweight", b.dweight, a.dweight);
  expect_equal("matmul dbias", b.dbias, a.dbias);
  expect_equal("layernorm dinp", b.ln_dinp, a.ln_dinp);
  expect_equal("layernorm dweight", b.ln_dw, a.ln_dw);
  expect_equal("layernorm dbias", b.ln_db, a.ln_db);
  expect_equal("softmax probs", b.probs, a.probs);
  expect_equal("embedding dwte", b.dwte, a.dwte);
  expect_equal("embedding dwpe", b.dwpe, a.dwpe);
  EXPECT_EQ(std::memcmp(&a.xent, &b.xent, sizeof(double)), 0) << a.xent << " vs " << b.xent;
  EXPECT_EQ(std::memcmp(&a.mse, &b.mse, sizeof(double)), 0) << a.mse << " vs " << b.mse;
  EXPECT_EQ(a.correct, b.correct);
}

// ---- the model's data movement (model_ops.h) ----------------------------------------------
// Copies, single additions and batch sums in the CPU's order: bit-identical. Every output
// starts from the same random contents on both sides, so "overwrites" and "leaves the
// rest alone" are checked as well.

TEST(OpsCuda, ModelOpsMatchCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  struct S {
    int64_t B, T, H, hd, off;
  };
  uint32_t seed = 900;
  for (const S& c : {S{1, 1, 1, 1, 0}, S{2, 7, 2, 16, 1}, S{3, 33, 4, 16, 0}, S{5, 50, 4, 32, 1}, S{2, 129, 3, 7, 1}}) {
    const int64_t B = c.B, T = c.T, H = c.H, hd = c.hd, C = H * hd, off = c.off, N = T - off;
    const std::string what = shape_str("model_ops", {{"B", B}, {"T", T}, {"H", H}, {"hd", hd}, {"off", off}});
    SCOPED_TRACE(what);
    const int64_t BTC = B * T * C;
    const FVec qkv = randn(3 * BTC, ++seed), a = randn(BTC, ++seed), b = randn(BTC, ++seed), d = randn(BTC, ++seed);
    const FVec q0 = randn(BTC, ++seed), k0 = randn(BTC, ++seed), v0 = randn(BTC, ++seed), big0 = randn(3 * BTC, ++seed);
    {  // split / merge / heads <-> rows
      FVec q = q0, k = k0, v = v0, m = big0, r = q0, h = k0;
      split_heads(q.data(), k.data(), v.data(), qkv.data(), B, T, H, hd);
      merge_heads(m.data(), a.data(), b.data(), d.data(), B, T, H, hd);
      heads_to_rows(r.data(), a.data(), B, T, H, hd);
      rows_to_heads(h.data(), b.data(), B, T, H, hd);
      Dev<float> g_qkv(qkv), g_a(a), g_b(b), g_d(d), g_q(q0), g_k(k0), g_v(v0), g_m(big0), g_r(q0), g_h(k0);
      split_heads_cuda(g_q.get(), g_k.get(), g_v.get(), g_qkv.get(), B, T, H, hd, nullptr);
      merge_heads_cuda(g_m.get(), g_a.get(), g_b.get(), g_d.get(), B, T, H, hd, nullptr);
      heads_to_rows_cuda(g_r.get(), g_a.get(), B, T, H, hd, nullptr);
      rows_to_heads_cuda(g_h.get(), g_b.get(), B, T, H, hd, nullptr);
      expect_equal(what + " split q", g_q.download("q"), q);
      expect_equal(what + " split k", g_k.download("k"), k);
      expect_equal(what + " split v", g_v.download("v"), v);
      expect_equal(what + " merge", g_m.download("merge"), m);
      expect_equal(what + " heads_to_rows", g_r.download("rows"), r);
      expect_equal(what + " rows_to_heads", g_h.download("heads"), h);
    }
    {  // tokens, CLS pooling
      const FVec emb = randn(B * N * C, ++seed), cls = randn(C, ++seed), wpe = randn(T * C, ++seed);
      const FVec dwpe0 = randn(T * C, ++seed), dcls0 = randn(C, ++seed), demb0 = randn(B * N * C, ++seed);
      const FVec pooled0 = randn(B * C, ++seed), dpooled = randn(B * C, ++seed);
      FVec enc = a, dwpe = dwpe0, dcls = dcls0, demb = demb0, pooled = pooled0, dinp = b;
      tokens_forward(enc.data(), emb.data(), cls.data(), wpe.data(), B, T, N, C, off);
      tokens_backward(dwpe.data(), dcls.data(), demb.data(), d.data(), B, T, N, C, off);
      cls_pool_forward(pooled.data(), a.data(), B, T, C);
      cls_pool_backward(dinp.data(), dpooled.data(), B, T, C);
      Dev<float> g_emb(emb), g_cls(cls), g_wpe(wpe), g_enc(a), g_dwpe(dwpe0), g_dcls(dcls0), g_demb(demb0), g_d(d),
          g_a(a), g_pooled(pooled0), g_dpooled(dpooled), g_dinp(b);
      tokens_forward_cuda(g_enc.get(), g_emb.get(), g_cls.get(), g_wpe.get(), B, T, N, C, off, nullptr);
      tokens_backward_cuda(g_dwpe.get(), g_dcls.get(), g_demb.get(), g_d.get(), B, T, N, C, off, nullptr);
      cls_pool_forward_cuda(g_pooled.get(), g_a.get(), B, T, C, nullptr);
      cls_pool_backward_cuda(g_dinp.get(), g_dpooled.get(), B, T, C, nullptr);
      expect_equal(what + " tokens_forward", g_enc.download("encoded"), enc);
      expect_equal(what + " dwpe", g_dwpe.download("dwpe"), dwpe);
      expect_equal(what + " dcls", g_dcls.download("dcls"), dcls);
      expect_equal(what + " demb", g_demb.download("demb"), demb);
      expect_equal(what + " cls_pool", g_pooled.download("pooled"), pooled);
      expect_equal(what + " cls_pool_backward", g_dinp.download("dinp"), dinp);
    }
    if (T >= 2) {  // the read-out: T tokens, the last one the query
      const int64_t Lp = T - 1;
      const FVec rq0 = randn(B * C, ++seed), rk0 = randn(B * Lp * C, ++seed), rv0 = randn(B * Lp * C, ++seed);
      const FVec pred0 = randn(B, ++seed), dpred = randn(B, ++seed), o = randn(B * C, ++seed),
                 do0 = randn(B * C, ++seed);
      FVec q = rq0, k = rk0, v = rv0, m = big0, pred = pred0, dout = do0;
      readout_split(q.data(), k.data(), v.data(), qkv.data(), B, T, H, hd);
      readout_merge(m.data(), rq0.data(), rk0.data(), rv0.data(), B, T, H, hd);
      readout_pick(pred.data(), o.data(), B, H, hd);
      readout_pick_backward(dout.data(), dpred.data(), B, H, hd);
      Dev<float> g_qkv(qkv), g_q(rq0), g_k(rk0), g_v(rv0), g_m(big0), g_pred(pred0), g_dpred(dpred), g_o(o), g_do(do0);
      readout_split_cuda(g_q.get(), g_k.get(), g_v.get(), g_qkv.get(), B, T, H, hd, nullptr);
      Dev<float> g_rq(rq0), g_rk(rk0), g_rv(rv0);
      readout_merge_cuda(g_m.get(), g_rq.get(), g_rk.get(), g_rv.get(), B, T, H, hd, nullptr);
      readout_pick_cuda(g_pred.get(), g_o.get(), B, H, hd, nullptr);
      readout_pick_backward_cuda(g_do.get(), g_dpred.get(), B, H, hd, nullptr);
      expect_equal(what + " readout q", g_q.download("q"), q);
      expect_equal(what + " readout k", g_k.download("k"), k);
      expect_equal(what + " readout v", g_v.download("v"), v);
      expect_equal(what + " readout merge", g_m.download("merge"), m);
      expect_equal(what + " readout pick", g_pred.download("pred"), pred);
      expect_equal(what + " readout pick backward", g_do.download("dout"), dout);
    }
  }
}

TEST(OpsCuda, ScaleExactAndGlobalNormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("scale/global_norm", {{"n", n}});
    SCOPED_TRACE(what);
    FVec g = randn(n, 950, 0.01f);
    Dev<float> g_g(g);
    scale_inplace(g.data(), n, 0.37f);
    scale_inplace_cuda(g_g.get(), n, 0.37f, nullptr);
    expect_equal(what + " scale", g_g.download("g"), g);
    // float64 sums of float32 squares in two fixed orders: ~1e-16 relative per term.
    const double want = global_norm(g.data(), n), got = global_norm_cuda(g_g.get(), n, ws.get(), nullptr);
    EXPECT_NEAR(got, want, 1e-12 * want) << what;
    EXPECT_EQ(global_norm_cuda(g_g.get(), n, ws.get(), nullptr), got) << what << ": not deterministic";
  }
}

}  // namespace
}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
