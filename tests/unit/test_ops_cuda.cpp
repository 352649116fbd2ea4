// The CUDA backend of the plain ops (kernels/op_list.h: the ops both model backends
// forward one to one) against the CPU ops on the same inputs (the CPU ops are themselves
// checked against float64 references in test_ops.cpp), generated from that list: each op
// of ATTNSWEEP_PLAIN_OPS gets TEST(CrossBackendOps, <op>), which calls check_<op>() below
// (an op added to the list without one does not compile), and OpList counts the checks
// against the list (one missing from the table kOpChecks, or one left for an op that
// left the list, fails it). The ops outside the list that have a CUDA twin (the losses'
// forwards, residual_backward, patchify, the optimizers, global_norm) have tests of their
// own (OpsCuda.*), as does the determinism of the reducing ops (OpsCudaDeterminism).
// Shapes hit the launchers' edges: 1, 7, 33, 129, 1025 rows / columns (one warp,
// partial warps, partial 32-column slabs, several 8-row blocks, several 1024-token
// tiles), plus a few large cases for the grid-stride loops and the chunk caps. Every
// output buffer carries guard bytes that must survive (out-of-bounds writes); outputs
// are checked for NaN/Inf first; a failure names the op and its full shape. Gradients
// and overwritten outputs start from random values on both sides, so "adds into" and
// "overwrites" are checked too. Finally two runs of every reducing op must give the
// same bits.
// Every test that runs an op needs a GPU and reports SKIPPED without one (never passes
// vacuously): each check_ starts with SKIP_WITHOUT_DEVICE(). The count test needs none.
// One file, longer than most: the tests are generated from the list here, so every
// check_<op> has to be in this translation unit (that is what makes a missing one fail
// to compile).
#ifdef ATTNSWEEP_HAVE_CUDA

#include "kernels/attention_cuda.h"
#include "kernels/model_ops.h"
#include "kernels/model_ops_cuda.h"
#include "kernels/op_list.h"
#include "kernels/ops.h"
#include "kernels/ops_cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
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
constexpr unsigned char kGuardByte = 0xFF;

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

void run_matmul_forward_case(int64_t N, int64_t C, int64_t OC, bool bias, uint32_t seed, AttentionCudaWorkspace* ws) {
  const std::string what = shape_str("matmul_forward", {{"N", N}, {"C", C}, {"OC", OC}, {"bias", bias}});
  SCOPED_TRACE(what);
  const FVec inp = randn(N * C, seed), w = randn(OC * C, seed + 1, 0.3f), b = randn(OC, seed + 2);
  FVec out(N * OC);
  matmul_forward(out.data(), inp.data(), w.data(), bias ? b.data() : nullptr, N, C, OC);
  Dev<float> g_inp(inp), g_w(w), g_b(b), g_out(zeros(N * OC));
  matmul_forward_cuda(g_out.get(), g_inp.get(), g_w.get(), bias ? g_b.get() : nullptr, N, C, OC, ws, nullptr);
  expect_close(what + " out", g_out.download(what + " out"), out, kTolGemm);
}

void check_matmul_forward() {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  uint32_t k = 0;
  for (int64_t N : kSizes)
    for (int64_t C : kSizes)
      for (int64_t OC : kSizes) {
        ++k;
        run_matmul_forward_case(N, C, OC, k % 2 == 0, 100 * k, ws.get());
      }
  run_matmul_forward_case(20000, 7, 33, true, 7, ws.get());
}

void run_matmul_backward_case(int64_t N, int64_t C, int64_t OC, bool want_dinp, bool want_dbias, uint32_t seed,
                              AttentionCudaWorkspace* ws) {
  const std::string what =
      shape_str("matmul_backward", {{"N", N}, {"C", C}, {"OC", OC}, {"dinp", want_dinp}, {"dbias", want_dbias}});
  SCOPED_TRACE(what);
  const FVec inp = randn(N * C, seed), w = randn(OC * C, seed + 1, 0.3f);
  const FVec dout = randn(N * OC, seed + 3), dinp0 = randn(N * C, seed + 4), dw0 = randn(OC * C, seed + 5),
             db0 = randn(OC, seed + 6);
  FVec dinp = dinp0, dw = dw0, db = db0;
  matmul_backward(want_dinp ? dinp.data() : nullptr, dw.data(), want_dbias ? db.data() : nullptr, dout.data(),
                  inp.data(), w.data(), N, C, OC);
  Dev<float> g_inp(inp), g_w(w), g_dout(dout), g_dinp(dinp0), g_dw(dw0), g_db(db0);
  matmul_backward_cuda(want_dinp ? g_dinp.get() : nullptr, g_dw.get(), want_dbias ? g_db.get() : nullptr, g_dout.get(),
                       g_inp.get(), g_w.get(), N, C, OC, ws, nullptr);
  expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolGemm);  // == dinp0 when not wanted
  expect_close(what + " dweight", g_dw.download(what + " dweight"), dw, kTolGemm);
  // dbias: float64 column sums on both sides, one float rounding each.
  expect_close(what + " dbias", g_db.download(what + " dbias"), db, kTolUlp);
}

void check_matmul_backward() {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  uint32_t k = 0;
  for (int64_t N : kSizes)
    for (int64_t C : kSizes)
      for (int64_t OC : kSizes) {
        ++k;
        run_matmul_backward_case(N, C, OC, k % 3 != 0, k % 4 != 0, 100 * k, ws.get());
      }
  // 20000 rows: more than 256 chunks of 64 rows, so the dbias chunk cap applies and
  // each colsum lane sums several rows.
  run_matmul_backward_case(20000, 7, 33, true, true, 7, ws.get());
}

// ---- layernorm ------------------------------------------------------------------------

// Row means away from 0.
FVec layernorm_input(int64_t N, int64_t C, uint32_t seed) {
  FVec inp = randn(N * C, seed, 2.0f);
  for (int64_t i = 0; i < N * C; ++i) inp[i] += static_cast<float>(i / C % 5);
  return inp;
}

// Every (N, C) of kSizes, then the chunk cap of the two-output colsum (20000 rows) and
// long rows (625 elements per lane).
template <class F>
void for_layernorm_shapes(F&& f) {
  uint32_t k = 0;
  for (int64_t N : kSizes)
    for (int64_t C : kSizes) f(N, C, 1000 + 10 * (++k));
  f(20000, 129, 3);
  f(2, 20000, 5);
}

// The CPU's row sums (the mean, the variance, the backward's two sums of dxhat) are float32
// in whichever order its build vectorises them: 16, 8 or 4 lanes at -O3, one term after
// another at -O1 (the ASan+UBSan build, scripts/test.sh). A float32 sum of C terms carries
// a random-walk rounding error of about u sqrt(C) (u = 2^-24) of its largest partial sum,
// and the device sums in float64. 2 u sqrt(C), at least kTolUlp: 1.7e-5 at C = 20000 (seen
// at -O1: 1.9e-6), 3.8e-6 at C = 1025 (seen: 1.1e-6); a wrong or missing term moves a
// mean by about 1/C of the scale (5e-5 at C = 20000) and stays caught.
double layernorm_tol(int64_t C) {
  return std::max(kTolUlp, 2.0 * 0x1p-24 * std::sqrt(static_cast<double>(C)));
}

void check_layernorm_forward() {
  SKIP_WITHOUT_DEVICE();
  for_layernorm_shapes([](int64_t N, int64_t C, uint32_t seed) {
    const std::string what = shape_str("layernorm_forward", {{"N", N}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec inp = layernorm_input(N, C, seed), w = randn(C, seed + 1), b = randn(C, seed + 2);
    FVec out(N * C), mean(N), rstd(N);
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    Dev<float> g_inp(inp), g_w(w), g_b(b), g_out(zeros(N * C)), g_mean(zeros(N)), g_rstd(zeros(N));
    layernorm_forward_cuda(g_out.get(), g_mean.get(), g_rstd.get(), g_inp.get(), g_w.get(), g_b.get(), N, C, nullptr);
    // float64 arithmetic rounded once or twice to float32, against the CPU's float32 sums.
    expect_close(what + " out", g_out.download(what + " out"), out, layernorm_tol(C));
    expect_close(what + " mean", g_mean.download(what + " mean"), mean, layernorm_tol(C));
    expect_close(what + " rstd", g_rstd.download(what + " rstd"), rstd, layernorm_tol(C));
  });
}

void check_layernorm_backward() {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for_layernorm_shapes([&](int64_t N, int64_t C, uint32_t seed) {
    const std::string what = shape_str("layernorm_backward", {{"N", N}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec inp = layernorm_input(N, C, seed), w = randn(C, seed + 1), b = randn(C, seed + 2),
               dout = randn(N * C, seed + 3);
    const FVec dinp0 = randn(N * C, seed + 4), dw0 = randn(C, seed + 5), db0 = randn(C, seed + 6);
    FVec out(N * C), mean(N), rstd(N), dinp = dinp0, dw = dw0, db = db0;
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), mean.data(), rstd.data(),
                       N, C);
    Dev<float> g_inp(inp), g_w(w), g_b(b), g_dout(dout), g_out(zeros(N * C)), g_mean(zeros(N)), g_rstd(zeros(N)),
        g_dinp(dinp0), g_dw(dw0), g_db(db0);
    // The backward reads the GPU's own mean/rstd, as a trainer would.
    layernorm_forward_cuda(g_out.get(), g_mean.get(), g_rstd.get(), g_inp.get(), g_w.get(), g_b.get(), N, C, nullptr);
    layernorm_backward_cuda(g_dinp.get(), g_dw.get(), g_db.get(), g_dout.get(), g_inp.get(), g_w.get(), g_mean.get(),
                            g_rstd.get(), N, C, ws.get(), nullptr);
    // float64 arithmetic rounded once or twice to float32; but dinp is rstd times a
    // difference of float32 sums of dxhat = dout * w (the CPU's, in whichever clone this
    // CPU takes), so its rounding is ulps of |dxhat| times rstd: large where a row is nearly
    // constant (C = 1: rstd = 1/sqrt(eps), 316; there the CPU and the emulated device
    // differed by 1.3e-5 on the EPYC VM of 2026-12-04, 4e-8 of rstd x |dxhat|).
    double dinp_floor = 0.0;
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c)
        dinp_floor = std::max(dinp_floor, static_cast<double>(rstd[i]) * std::fabs(dout[i * C + c] * w[c]));
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, layernorm_tol(C), dinp_floor);
    expect_close(what + " dweight", g_dw.download(what + " dweight"), dw, layernorm_tol(C));
    expect_close(what + " dbias", g_db.download(what + " dbias"), db, layernorm_tol(C));
  });
}

// ---- element-wise ---------------------------------------------------------------------

// 65536 blocks x 256 threads = 2^24 is the launch cap: beyond it the grid-stride loop turns.
const int64_t kElementwiseSizes[] = {1, 7, 33, 129, 1025, (int64_t{1} << 24) + 1025};

void check_gelu_forward() {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("gelu_forward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec inp = randn(n, 11, 3.0f);
    FVec out(n);
    gelu_forward(out.data(), inp.data(), n);
    Dev<float> g_inp(inp), g_out(zeros(n));
    gelu_forward_cuda(g_out.get(), g_inp.get(), n, nullptr);
    // |gelu(x)| <= |x|, and in the left tail 0.5 x (1 + tanh u) cancels: the rounding of
    // tanh near -1 (an ulp of 1) is multiplied by |x|, so errors scale with max |x|, not
    // with max |gelu(x)| (a single x = -3.4 gives gelu = -3e-5 but an error of ~1e-8).
    double xmax = 0.0;
    for (float x : inp) xmax = std::max(xmax, std::fabs(static_cast<double>(x)));
    expect_close(what + " out", g_out.download(what + " out"), out, kTolUlp, xmax);
  }
}

void check_gelu_backward() {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("gelu_backward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec inp = randn(n, 11, 3.0f), dout = randn(n, 12), dinp0 = randn(n, 13);
    FVec dinp = dinp0;
    gelu_backward(dinp.data(), inp.data(), dout.data(), n);
    Dev<float> g_inp(inp), g_dout(dout), g_dinp(dinp0);
    gelu_backward_cuda(g_dinp.get(), g_inp.get(), g_dout.get(), n, nullptr);
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolGeluGrad);
  }
}

void check_residual_forward() {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("residual_forward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec a = randn(n, 21), b = randn(n, 22);
    FVec out(n);
    residual_forward(out.data(), a.data(), b.data(), n);
    Dev<float> g_a(a), g_b(b), g_out(zeros(n));
    residual_forward_cuda(g_out.get(), g_a.get(), g_b.get(), n, nullptr);
    expect_equal(what + " out", g_out.download(what + " out"), out);  // one float addition each
  }
}

// Not a plain op (no backend forwards it), but it has a CUDA twin.
TEST(OpsCuda, ResidualBackwardMatchesCpuExactly) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("residual_backward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec dout = randn(n, 23), d10 = randn(n, 24), d20 = randn(n, 25);
    FVec d1 = d10, d2 = d20;
    residual_backward(d1.data(), d2.data(), dout.data(), n);
    Dev<float> g_dout(dout), g_d1(d10), g_d2(d20);
    residual_backward_cuda(g_d1.get(), g_d2.get(), g_dout.get(), n, nullptr);
    expect_equal(what + " dinp1", g_d1.download(what + " dinp1"), d1);  // one float addition each
    expect_equal(what + " dinp2", g_d2.download(what + " dinp2"), d2);
  }
}

// The precision conversions (kernels/ops_cuda.h) at every elementwise size, the last past
// the capped grid (65,536 blocks of 256 threads: 2^24 elements), where only the kernels'
// grid-stride loop reaches the tail. Values exact in bf16 go there and back unchanged.
TEST(OpsCuda, Bf16ConversionsRoundTripAtEverySize) {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("f32_to_bf16, bf16_to_f32", {{"n", n}});
    SCOPED_TRACE(what);
    FVec x = randn(n, 31);
    for (float& v : x) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);  // exact in bf16
    Dev<float> g_x(x), g_back(zeros(n));
    Dev<uint16_t> g_h(std::vector<uint16_t>(n, 0));
    f32_to_bf16_cuda(g_h.get(), g_x.get(), n, nullptr);
    bf16_to_f32_cuda(g_back.get(), g_h.get(), n, nullptr);
    const FVec back = g_back.download(what);
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (std::bit_cast<uint32_t>(back[i]) != std::bit_cast<uint32_t>(x[i]) && wrong++ == 0) first = i;
    EXPECT_EQ(wrong, 0) << what << ": first at " << first;
  }
}

void check_scale_inplace() {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("scale_inplace", {{"n", n}});
    SCOPED_TRACE(what);
    FVec g = randn(n, 950, 0.01f);
    Dev<float> g_g(g);
    scale_inplace(g.data(), n, 0.37f);
    scale_inplace_cuda(g_g.get(), n, 0.37f, nullptr);
    expect_equal(what, g_g.download(what), g);  // one float product each
  }
}

// ---- pooling --------------------------------------------------------------------------

// (B, T, C) of both mean pools: B 1 and 7 by every T, C of kSizes, then 33 samples.
template <class F>
void for_pool_shapes(F&& f) {
  for (int64_t B : {1, 7})
    for (int64_t T : kSizes)
      for (int64_t C : kSizes) f(B, T, C);
  f(33, 7, 129);
}

// The mean of values of both signs can be far below them: errors are relative to max |x|.
double max_abs(const FVec& x) {
  double m = 0.0;
  for (float e : x) m = std::max(m, std::fabs(static_cast<double>(e)));
  return m;
}

void check_meanpool_forward() {
  SKIP_WITHOUT_DEVICE();
  for_pool_shapes([](int64_t B, int64_t T, int64_t C) {
    const std::string what = shape_str("meanpool_forward", {{"B", B}, {"T", T}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec inp = randn(B * T * C, 31);
    FVec out(B * C);
    meanpool_forward(out.data(), inp.data(), B, T, C);
    Dev<float> g_inp(inp), g_out(zeros(B * C));
    meanpool_forward_cuda(g_out.get(), g_inp.get(), B, T, C, nullptr);
    // The same float64 sum in the same order (one rounding).
    expect_close(what + " out", g_out.download(what + " out"), out, kTolUlp, max_abs(inp));
  });
}

void check_meanpool_backward() {
  SKIP_WITHOUT_DEVICE();
  for_pool_shapes([](int64_t B, int64_t T, int64_t C) {
    const std::string what = shape_str("meanpool_backward", {{"B", B}, {"T", T}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec dout = randn(B * C, 32), dinp0 = randn(B * T * C, 33);
    FVec dinp = dinp0;
    meanpool_backward(dinp.data(), dout.data(), B, T, C);
    Dev<float> g_dout(dout), g_dinp(dinp0);
    meanpool_backward_cuda(g_dinp.get(), g_dout.get(), B, T, C, nullptr);
    // dout * inv + dinp may be one FMA on the GPU.
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolUlp);
  });
}

// Key mask (B, T) of the masked pools: sample 0 keeps every row, sample 1 none (its mean
// is 0 and it gets no gradient), the others a random 70% of their rows.
FVec pool_mask(int64_t B, int64_t T, uint32_t seed) {
  std::mt19937 rng(seed);
  std::bernoulli_distribution keep(0.7);
  FVec mask(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) mask[b * T + t] = b == 0 || (b > 1 && keep(rng)) ? 1.0f : 0.0f;
  return mask;
}

void check_masked_meanpool_forward() {
  SKIP_WITHOUT_DEVICE();
  for_pool_shapes([](int64_t B, int64_t T, int64_t C) {
    const std::string what = shape_str("masked_meanpool_forward", {{"B", B}, {"T", T}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec inp = randn(B * T * C, 34), mask = pool_mask(B, T, 35), out0 = randn(B * C, 36);
    FVec out = out0;
    masked_meanpool_forward(out.data(), inp.data(), mask.data(), B, T, C);
    Dev<float> g_inp(inp), g_mask(mask), g_out(out0);
    masked_meanpool_forward_cuda(g_out.get(), g_inp.get(), g_mask.get(), B, T, C, nullptr);
    // The CPU's float64 sum in t order and its one rounding: bit-identical; overwrites.
    expect_equal(what + " out", g_out.download(what + " out"), out);
  });
}

void check_masked_meanpool_backward() {
  SKIP_WITHOUT_DEVICE();
  for_pool_shapes([](int64_t B, int64_t T, int64_t C) {
    const std::string what = shape_str("masked_meanpool_backward", {{"B", B}, {"T", T}, {"C", C}});
    SCOPED_TRACE(what);
    const FVec dout = randn(B * C, 37), mask = pool_mask(B, T, 38), dinp0 = randn(B * T * C, 39);
    FVec dinp = dinp0;
    masked_meanpool_backward(dinp.data(), dout.data(), mask.data(), B, T, C);
    Dev<float> g_dout(dout), g_mask(mask), g_dinp(dinp0);
    masked_meanpool_backward_cuda(g_dinp.get(), g_dout.get(), g_mask.get(), B, T, C, nullptr);
    // dout * inv + dinp may be one FMA on the GPU; the masked rows keep dinp0 exactly.
    expect_close(what + " dinp", g_dinp.download(what + " dinp"), dinp, kTolUlp);
  });
}

// ---- losses -----------------------------------------------------------------------------

struct XentInputs {
  FVec logits;
  std::vector<int32_t> targets;
};

XentInputs xent_inputs(int64_t N, int64_t V, bool integer_logits) {
  XentInputs in;
  FVec& logits = in.logits;
  logits = randn(N * V, static_cast<uint32_t>(N * 7 + V), 2.0f);
  // Integer logits tie often: the first maximum must win on both sides.
  if (integer_logits)
    for (auto& x : logits) x = std::round(x);
  std::vector<int32_t>& targets = in.targets;
  targets = randint(N, static_cast<int32_t>(V), static_cast<uint32_t>(N + V));
  for (int64_t i = 0; i < N; i += 2)  // every other row: the target is a (first or later) maximum
    targets[i] = static_cast<int32_t>(std::max_element(logits.begin() + i * V, logits.begin() + (i + 1) * V) -
                                      (logits.begin() + i * V));
  for (int64_t i = 1; i < N; i += 4) {  // and sometimes the last maximum, which counts only if unique
    int64_t last = 0;
    for (int64_t j = 0; j < V; ++j)
      if (logits[i * V + j] >= logits[i * V + last]) last = j;
    targets[i] = static_cast<int32_t>(last);
  }
  return in;
}

// (N, V, integer logits): every N, V of kSizes, more ties, and a GPT-2 vocabulary (1571
// columns per lane).
template <class F>
void for_xent_shapes(F&& f) {
  for (int64_t N : kSizes)
    for (int64_t V : kSizes) f(N, V, V % 2 == 1 && N > 7);
  for (int64_t V : {7, 129, 1025}) f(int64_t{129}, V, true);
  f(3, 50257, false);
}

// The forward is not a plain op (CudaBackend writes its own: host values, or the step
// graph's device scalars).
TEST(OpsCuda, SoftmaxCrossEntropyForwardMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for_xent_shapes([&](int64_t N, int64_t V, bool integer_logits) {
    const std::string what =
        shape_str("softmax_crossentropy_forward", {{"N", N}, {"V", V}, {"integer_logits", integer_logits}});
    SCOPED_TRACE(what);
    const XentInputs in = xent_inputs(N, V, integer_logits);
    FVec probs(N * V);
    int64_t correct = -1;
    const double loss = softmax_crossentropy_forward(probs.data(), &correct, in.logits.data(), in.targets.data(), N, V);
    Dev<float> g_logits(in.logits), g_probs(zeros(N * V));
    Dev<int32_t> g_targets(in.targets);
    int64_t g_correct = -1;
    const double g_loss = softmax_crossentropy_forward_cuda(g_probs.get(), &g_correct, g_logits.get(), g_targets.get(),
                                                            N, V, ws.get(), nullptr);
    expect_loss_close(what + " loss", g_loss, loss);
    EXPECT_EQ(g_correct, correct) << what << " n_correct";
    // float(exp(x - max) / z) in float64 on both sides.
    expect_close(what + " probs", g_probs.download(what + " probs"), probs, kTolUlp);
    // n_correct may be null.
    EXPECT_NO_THROW(softmax_crossentropy_forward_cuda(g_probs.get(), nullptr, g_logits.get(), g_targets.get(), N, V,
                                                      ws.get(), nullptr));
  });
}

void check_softmax_crossentropy_backward() {
  SKIP_WITHOUT_DEVICE();
  for_xent_shapes([](int64_t N, int64_t V, bool integer_logits) {
    const std::string what =
        shape_str("softmax_crossentropy_backward", {{"N", N}, {"V", V}, {"integer_logits", integer_logits}});
    SCOPED_TRACE(what);
    const XentInputs in = xent_inputs(N, V, integer_logits);
    const FVec dl0 = randn(N * V, 41);
    const float dloss = 0.7f;
    FVec probs(N * V), dl = dl0;
    softmax_crossentropy_forward(probs.data(), nullptr, in.logits.data(), in.targets.data(), N, V);
    softmax_crossentropy_backward(dl.data(), probs.data(), in.targets.data(), dloss, N, V);
    // Both sides from the CPU's probs.
    Dev<float> g_probs(probs), g_dl(dl0);
    Dev<int32_t> g_targets(in.targets);
    softmax_crossentropy_backward_cuda(g_dl.get(), g_probs.get(), g_targets.get(), dloss, N, V, nullptr);
    expect_close(what + " dlogits", g_dl.download(what + " dlogits"), dl, kTolUlp);  // one FMA apart
  });
}

// 3e6 > 1024 blocks x 2048: the partial-count cap applies.
const int64_t kMseSizes[] = {1, 7, 33, 129, 1025, 3000001};

// The forward is not a plain op (as the cross-entropy's).
TEST(OpsCuda, MseForwardMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for (int64_t n : kMseSizes) {
    const std::string what = shape_str("mse_forward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec pred = randn(n, 51), target = randn(n, 52);
    const double loss = mse_forward(pred.data(), target.data(), n);
    Dev<float> g_pred(pred), g_target(target);
    const double g_loss = mse_forward_cuda(g_pred.get(), g_target.get(), n, ws.get(), nullptr);
    expect_loss_close(what + " loss", g_loss, loss);
  }
}

void check_mse_backward() {
  SKIP_WITHOUT_DEVICE();
  for (int64_t n : kMseSizes) {
    const std::string what = shape_str("mse_backward", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec pred = randn(n, 51), target = randn(n, 52), d0 = randn(n, 53);
    const float dloss = 1.3f;
    FVec d = d0;
    mse_backward(d.data(), pred.data(), target.data(), dloss, n);
    Dev<float> g_pred(pred), g_target(target), g_d(d0);
    mse_backward_cuda(g_d.get(), g_pred.get(), g_target.get(), dloss, n, nullptr);
    expect_close(what + " dpred", g_d.download(what + " dpred"), d, kTolUlp);  // one FMA apart
  }
}

// ---- embeddings, patchify -----------------------------------------------------------------

// (B, T, C, V, wpe, dwte): T by C by V (V = 1: every token hits the same row), then 2050
// tokens (three 1024-id tiles) and C > 128 (several column blocks).
template <class F>
void for_embedding_shapes(F&& f) {
  uint32_t k = 0;
  for (int64_t T : {1, 33, 129})
    for (int64_t C : kSizes)
      for (int32_t V : {1, 5, 1025}) {
        ++k;
        f(k % 2 ? 1 : 7, T, C, V, k % 3 != 0, k % 5 != 0);
      }
  f(2, 1025, 129, 50, true, true);
  f(3, 7, 1025, 1025, true, true);
}

void check_embedding_forward() {
  SKIP_WITHOUT_DEVICE();
  for_embedding_shapes([](int64_t B, int64_t T, int64_t C, int32_t V, bool use_wpe, bool) {
    const std::string what = shape_str("embedding_forward", {{"B", B}, {"T", T}, {"C", C}, {"V", V}, {"wpe", use_wpe}});
    SCOPED_TRACE(what);
    const std::vector<int32_t> ids = randint(B * T, V, static_cast<uint32_t>(B * 1000 + T + C));
    const FVec wte = randn(V * C, 61), wpe = randn(T * C, 62);
    FVec out(B * T * C);
    embedding_forward(out.data(), ids.data(), wte.data(), use_wpe ? wpe.data() : nullptr, B, T, C);
    Dev<int32_t> g_ids(ids);
    Dev<float> g_wte(wte), g_wpe(wpe), g_out(zeros(B * T * C));
    embedding_forward_cuda(g_out.get(), g_ids.get(), g_wte.get(), use_wpe ? g_wpe.get() : nullptr, B, T, C, nullptr);
    expect_equal(what + " out", g_out.download(what + " out"), out);  // one addition per output
  });
}

void check_embedding_backward() {
  SKIP_WITHOUT_DEVICE();
  for_embedding_shapes([](int64_t B, int64_t T, int64_t C, int32_t V, bool use_wpe, bool use_dwte) {
    const std::string what = shape_str("embedding_backward",
                                       {{"B", B}, {"T", T}, {"C", C}, {"V", V}, {"dwpe", use_wpe}, {"dwte", use_dwte}});
    SCOPED_TRACE(what);
    const std::vector<int32_t> ids = randint(B * T, V, static_cast<uint32_t>(B * 1000 + T + C));
    const FVec dout = randn(B * T * C, 63), dwte0 = randn(V * C, 64), dwpe0 = randn(T * C, 65);
    FVec dwte = dwte0, dwpe = dwpe0;
    embedding_backward(use_dwte ? dwte.data() : nullptr, use_wpe ? dwpe.data() : nullptr, dout.data(), ids.data(), B, T,
                       C);
    Dev<int32_t> g_ids(ids);
    Dev<float> g_dout(dout), g_dwte(dwte0), g_dwpe(dwpe0);
    embedding_backward_cuda(use_dwte ? g_dwte.get() : nullptr, use_wpe ? g_dwpe.get() : nullptr, g_dout.get(),
                            g_ids.get(), B, T, C, nullptr);
    // Scatter-adds in token order, as the CPU: bit-identical.
    expect_equal(what + " dwte", g_dwte.download(what + " dwte"), dwte);
    expect_equal(what + " dwpe", g_dwpe.download(what + " dwpe"), dwpe);
  });
}

// Not a plain op (the model patchifies on the host), but it has a CUDA twin.
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

// ---- optimizers (not plain ops: CudaBackend's read a step graph's scalars) ----------------

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

// Not a plain op (CudaBackend's leaves a step graph's sum of squares on the device).
TEST(OpsCuda, GlobalNormMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  auto ws = make_workspace();
  for (int64_t n : kElementwiseSizes) {
    const std::string what = shape_str("global_norm", {{"n", n}});
    SCOPED_TRACE(what);
    const FVec g = randn(n, 950, 0.0037f);
    Dev<float> g_g(g);
    // float64 sums of float32 squares in two fixed orders: ~1e-16 relative per term.
    const double want = global_norm(g.data(), n), got = global_norm_cuda(g_g.get(), n, ws.get(), nullptr);
    EXPECT_NEAR(got, want, 1e-12 * want) << what;
    EXPECT_EQ(global_norm_cuda(g_g.get(), n, ws.get(), nullptr), got) << what << ": not deterministic";
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

// (B, T, H, hd, off): T = N + off tokens (off = 1: a CLS token), C = H hd.
struct ModelShape {
  int64_t B, T, H, hd, off;
  int64_t C() const { return H * hd; }
  int64_t N() const { return T - off; }
  int64_t BTC() const { return B * T * C(); }
  std::string what(const char* op) const {
    return shape_str(op, {{"B", B}, {"T", T}, {"H", H}, {"hd", hd}, {"off", off}});
  }
};
const ModelShape kModelShapes[] = {
    {1, 1, 1, 1, 0}, {2, 7, 2, 16, 1}, {3, 33, 4, 16, 0}, {5, 50, 4, 32, 1}, {2, 129, 3, 7, 1}};

// Runs one layout op (a copy or a scatter in the CPU's order) on both backends with the
// same arguments and compares its outputs bit for bit. ins: the sizes of its inputs;
// outs: the names and sizes of its outputs, filled with noise first (the op must write,
// or keep, every element as the CPU does). call(out, in, dev) calls the CPU op on host
// pointers (dev false) or its CUDA twin on device pointers: LAYOUT_CALL below writes the
// two calls from one argument list. seed moves on by one per tensor.
template <class Call>
void check_layout_op(const std::string& what, uint32_t& seed, const std::vector<int64_t>& ins,
                     const std::vector<std::pair<const char*, int64_t>>& outs, const Call& call) {
  SCOPED_TRACE(what);
  std::vector<FVec> in, out;
  for (int64_t n : ins) in.push_back(randn(n, ++seed));
  for (const auto& o : outs) out.push_back(randn(o.second, ++seed));
  std::vector<std::unique_ptr<Dev<float>>> g_in, g_out;
  std::vector<const float*> h_in_p, g_in_p;
  std::vector<float*> h_out_p, g_out_p;
  for (const FVec& x : in) {
    g_in.push_back(std::make_unique<Dev<float>>(x));
    h_in_p.push_back(x.data());
    g_in_p.push_back(g_in.back()->get());
  }
  for (FVec& x : out) {
    g_out.push_back(std::make_unique<Dev<float>>(x));
    h_out_p.push_back(x.data());
    g_out_p.push_back(g_out.back()->get());
  }
  call(h_out_p, h_in_p, false);
  call(g_out_p, g_in_p, true);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string name = what + (*outs[i].first ? std::string(" ") + outs[i].first : std::string());
    expect_equal(name, g_out[i]->download(name), out[i]);
  }
}

// The call of check_layout_op: op(ARGS) on the host, op_cuda(ARGS, stream 0) on the device;
// ARGS may name out[i] and in[i].
#define LAYOUT_CALL(op, ...)                                                           \
  [&](const std::vector<float*>& out, const std::vector<const float*>& in, bool dev) { \
    dev ? op##_cuda(__VA_ARGS__, nullptr) : op(__VA_ARGS__);                           \
  }

void check_split_heads() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 900;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("split_heads"), seed, {3 * s.BTC()}, {{"q", s.BTC()}, {"k", s.BTC()}, {"v", s.BTC()}},
                    LAYOUT_CALL(split_heads, out[0], out[1], out[2], in[0], s.B, s.T, s.H, s.hd));
}

void check_merge_heads() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 920;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("merge_heads"), seed, {s.BTC(), s.BTC(), s.BTC()}, {{"", 3 * s.BTC()}},
                    LAYOUT_CALL(merge_heads, out[0], in[0], in[1], in[2], s.B, s.T, s.H, s.hd));
}

void check_heads_to_rows() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 940;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("heads_to_rows"), seed, {s.BTC()}, {{"", s.BTC()}},
                    LAYOUT_CALL(heads_to_rows, out[0], in[0], s.B, s.T, s.H, s.hd));
}

void check_rows_to_heads() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 960;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("rows_to_heads"), seed, {s.BTC()}, {{"", s.BTC()}},
                    LAYOUT_CALL(rows_to_heads, out[0], in[0], s.B, s.T, s.H, s.hd));
}

void check_tokens_forward() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 980;
  for (const ModelShape& s : kModelShapes) {
    const int64_t B = s.B, T = s.T, N = s.N(), C = s.C();
    check_layout_op(s.what("tokens_forward"), seed, {B * N * C, C, T * C}, {{"encoded", s.BTC()}},
                    LAYOUT_CALL(tokens_forward, out[0], in[0], in[1], in[2], B, T, N, C, s.off));
  }
}

void check_tokens_backward() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1000;
  for (const ModelShape& s : kModelShapes) {
    const int64_t B = s.B, T = s.T, N = s.N(), C = s.C();
    check_layout_op(s.what("tokens_backward"), seed, {s.BTC()}, {{"dwpe", T * C}, {"dcls", C}, {"demb", B * N * C}},
                    LAYOUT_CALL(tokens_backward, out[0], out[1], out[2], in[0], B, T, N, C, s.off));
  }
}

void check_cls_pool_forward() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1020;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("cls_pool_forward"), seed, {s.BTC()}, {{"", s.B * s.C()}},
                    LAYOUT_CALL(cls_pool_forward, out[0], in[0], s.B, s.T, s.C()));
}

void check_cls_pool_backward() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1040;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("cls_pool_backward"), seed, {s.B * s.C()}, {{"", s.BTC()}},
                    LAYOUT_CALL(cls_pool_backward, out[0], in[0], s.B, s.T, s.C()));
}

// The read-out: T tokens, the last one the query, Lp = T - 1 prompt tokens (T >= 2).

void check_readout_split() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1060;
  for (const ModelShape& s : kModelShapes) {
    if (s.T < 2) continue;
    const int64_t B = s.B, C = s.C(), Lp = s.T - 1;
    check_layout_op(s.what("readout_split"), seed, {3 * s.BTC()}, {{"q", B * C}, {"k", B * Lp * C}, {"v", B * Lp * C}},
                    LAYOUT_CALL(readout_split, out[0], out[1], out[2], in[0], B, s.T, s.H, s.hd));
  }
}

void check_readout_merge() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1080;
  for (const ModelShape& s : kModelShapes) {
    if (s.T < 2) continue;
    const int64_t B = s.B, C = s.C(), Lp = s.T - 1;
    check_layout_op(s.what("readout_merge"), seed, {B * C, B * Lp * C, B * Lp * C}, {{"", 3 * s.BTC()}},
                    LAYOUT_CALL(readout_merge, out[0], in[0], in[1], in[2], B, s.T, s.H, s.hd));
  }
}

void check_readout_pick() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1100;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("readout_pick"), seed, {s.B * s.C()}, {{"", s.B}},
                    LAYOUT_CALL(readout_pick, out[0], in[0], s.B, s.H, s.hd));
}

void check_readout_pick_backward() {
  SKIP_WITHOUT_DEVICE();
  uint32_t seed = 1120;
  for (const ModelShape& s : kModelShapes)
    check_layout_op(s.what("readout_pick_backward"), seed, {s.B}, {{"", s.B * s.C()}},
                    LAYOUT_CALL(readout_pick_backward, out[0], in[0], s.B, s.H, s.hd));
}
#undef LAYOUT_CALL

// ---- one test per plain op, from the list ---------------------------------------------------

// TEST(CrossBackendOps, <op>) for each op of kernels/op_list.h: an op without a
// check_<op> above does not compile.
#define ATTNSWEEP_CROSS_BACKEND_TEST(name, params) \
  TEST(CrossBackendOps, name) {                    \
    check_##name();                                \
  }
ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_CROSS_BACKEND_TEST, ATTNSWEEP_CROSS_BACKEND_TEST)
#undef ATTNSWEEP_CROSS_BACKEND_TEST

// The checks, written out by hand (not from the list, so that the count below means
// something): a check written for a new op but not entered here, or one left here after
// its op left the list, fails OpList.EveryPlainOpHasOneCheck.
struct OpCheck {
  const char* op;
  void (*check)();
};
const OpCheck kOpChecks[] = {
    {"matmul_forward", check_matmul_forward},
    {"matmul_backward", check_matmul_backward},
    {"layernorm_forward", check_layernorm_forward},
    {"layernorm_backward", check_layernorm_backward},
    {"gelu_forward", check_gelu_forward},
    {"gelu_backward", check_gelu_backward},
    {"residual_forward", check_residual_forward},
    {"meanpool_forward", check_meanpool_forward},
    {"meanpool_backward", check_meanpool_backward},
    {"softmax_crossentropy_backward", check_softmax_crossentropy_backward},
    {"mse_backward", check_mse_backward},
    {"embedding_forward", check_embedding_forward},
    {"embedding_backward", check_embedding_backward},
    {"split_heads", check_split_heads},
    {"merge_heads", check_merge_heads},
    {"heads_to_rows", check_heads_to_rows},
    {"rows_to_heads", check_rows_to_heads},
    {"tokens_forward", check_tokens_forward},
    {"tokens_backward", check_tokens_backward},
    {"cls_pool_forward", check_cls_pool_forward},
    {"cls_pool_backward", check_cls_pool_backward},
    {"masked_meanpool_forward", check_masked_meanpool_forward},
    {"masked_meanpool_backward", check_masked_meanpool_backward},
    {"readout_split", check_readout_split},
    {"readout_merge", check_readout_merge},
    {"readout_pick", check_readout_pick},
    {"readout_pick_backward", check_readout_pick_backward},
    {"scale_inplace", check_scale_inplace},
};

#define ATTNSWEEP_OP_NAME(name, params) #name,
constexpr const char* kPlainOpNames[] = {ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_OP_NAME, ATTNSWEEP_OP_NAME)};
#undef ATTNSWEEP_OP_NAME
constexpr size_t kNumPlainOps = std::size(kPlainOpNames);

// Needs no GPU (no "Cuda" in its name: it runs with the CPU tests).
TEST(OpList, EveryPlainOpHasOneCheck) {
  EXPECT_EQ(std::size(kOpChecks), kNumPlainOps)
      << "kernels/op_list.h has " << kNumPlainOps << " plain ops, kOpChecks " << std::size(kOpChecks) << " checks";
  for (const char* op : kPlainOpNames) {
    const auto n = std::count_if(std::begin(kOpChecks), std::end(kOpChecks),
                                 [&](const OpCheck& c) { return std::string_view(c.op) == op; });
    EXPECT_EQ(n, 1) << op << ": " << n << " rows in kOpChecks (want one: its check_" << op << ")";
  }
  for (const OpCheck& c : kOpChecks) {
    EXPECT_TRUE(std::any_of(std::begin(kPlainOpNames), std::end(kPlainOpNames),
                            [&](const char* op) { return std::string_view(c.op) == op; }))
        << c.op << ": checked, but not in kernels/op_list.h";
  }
}

}  // namespace
}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
