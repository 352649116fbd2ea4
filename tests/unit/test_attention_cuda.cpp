// CUDA attention against the CPU backend: the materialising cuBLAS path (the GPU
// oracle) and the fused kernels (float32 and bfloat16), forward (O, lse, attn_fro,
// jac_fro) and backward (dQ, dK, dV), for every activation and scale, N = 1, 7, 129,
// 1000, d = 16, 64, 128, Nq != Nk, key masks (with a batch item that attends nothing),
// causal masks; the fallback for unsupported head sizes; bit-identical reruns.
// Every test needs a GPU and reports SKIPPED without one (never passes vacuously).
#ifdef ATTNSWEEP_HAVE_CUDA

#include "kernels/attention.h"
#include "kernels/attention_cuda.h"
#include "tests/unit/attention_reference.h"

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

namespace {
// The long side of the shape tests: 1000 on a GPU; 513 (8 full key tiles of 64 and a
// partial one, as 1000 has 15 and one) on the emulated device, which runs a block's
// threads one after another: the q1000 cases were half of CI's emulated stage
// (docs/cuda-emulator.md).
#ifdef ATTNSWEEP_CUDA_EMULATED
constexpr int64_t kLong = 513;
#else
constexpr int64_t kLong = 1000;
#endif
}  // namespace

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

template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n_) check(cudaMalloc(&p_, n_ * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) {
    if (n_) check(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (p_) cudaFree(p_);
  }
  T* get() const { return static_cast<T*>(p_); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    check(cudaDeviceSynchronize(), "kernel");
    if (n_) check(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
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

// bfloat16 on the host: round to nearest even, as __float2bfloat16 does.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
float from_bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = to_bf16(x[i]);
  return r;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = from_bf16(x[i]);
  return r;
}

struct Case {
  std::string act_name;
  ActivationSpec act;
  int64_t Nq, Nk, d, dv;
  bool key_mask, causal;
};

std::string case_name(const Case& c) {
  std::ostringstream s;
  s << c.act_name << "_q" << c.Nq << "_k" << c.Nk << "_d" << c.d;
  if (c.dv != c.d) s << "_dv" << c.dv;
  if (c.key_mask) s << "_mask";
  if (c.causal) s << "_causal";
  return s.str();
}

struct Inputs {
  AttentionSpec spec;
  AttentionShape shape;
  std::vector<float> Q, K, V, dO, mask;
};

Inputs make_inputs(const Case& c, bool round_to_bf16) {
  Inputs in;
  in.spec.act = c.act;
  in.spec.causal = c.causal;
  in.spec.collect_norms = true;
  in.shape.B = 2;
  in.shape.H = c.Nq * c.Nk >= 100000 ? 1 : 2;
  in.shape.Nq = c.Nq;
  in.shape.Nk = c.Nk;
  in.shape.d = c.d;
  in.shape.dv = c.dv;
  const AttentionShape& s = in.shape;
  std::mt19937 rng(static_cast<uint32_t>(c.Nq * 7919 + c.Nk * 104729 + c.d * 31 + c.key_mask + 2 * c.causal));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, int64_t n) {
    v.resize(n);
    for (auto& x : v) x = round_to_bf16 ? from_bf16(to_bf16(normal(rng))) : normal(rng);
  };
  fill(in.Q, s.B * s.H * s.Nq * s.d);
  fill(in.K, s.B * s.H * s.Nk * s.d);
  fill(in.V, s.B * s.H * s.Nk * s.dv);
  fill(in.dO, s.B * s.H * s.Nq * s.dv);
  if (c.key_mask) {
    // Item 0: about 3 in 4 keys attended (key 0 always); the last item attends nothing.
    in.mask.assign(s.B * s.Nk, 0.0f);
    std::bernoulli_distribution keep(0.75);
    for (int64_t j = 0; j < s.Nk; ++j) in.mask[j] = (j == 0 || keep(rng)) ? 1.0f : 0.0f;
  }
  return in;
}

struct Outputs {
  std::vector<float> O, lse, dQ, dK, dV;
  std::vector<double> attn_fro, jac_fro;
};

Outputs run_cpu(const Inputs& in) {
  const AttentionShape& s = in.shape;
  Outputs o;
  o.O.resize(s.B * s.H * s.Nq * s.dv);
  o.lse.resize(s.B * s.H * s.Nq);
  o.attn_fro.resize(s.B * s.H);
  o.jac_fro.resize(s.B * s.H);
  o.dQ.resize(in.Q.size());
  o.dK.resize(in.K.size());
  o.dV.resize(in.V.size());
  const float* mask = in.mask.empty() ? nullptr : in.mask.data();
  attention_forward_cpu(in.spec, s, in.Q.data(), in.K.data(), in.V.data(), mask, o.O.data(), o.lse.data(),
                        o.attn_fro.data(), o.jac_fro.data());
  attention_backward_cpu(in.spec, s, in.Q.data(), in.K.data(), in.V.data(), mask, o.O.data(), in.dO.data(),
                         o.lse.data(), o.dQ.data(), o.dK.data(), o.dV.data());
  return o;
}

enum class Path { ref, fused_f32, fused_bf16 };

// Runs forward then backward (from this path's own O and lse) on the GPU.
Outputs run_gpu(const Inputs& in, Path path, AttentionCudaWorkspace* ws) {
  const AttentionShape& s = in.shape;
  const int64_t nO = s.B * s.H * s.Nq * s.dv, nrow = s.B * s.H * s.Nq, nbh = s.B * s.H;
  std::unique_ptr<DeviceBuffer<float>> mask;
  if (!in.mask.empty()) mask = std::make_unique<DeviceBuffer<float>>(in.mask);
  const float* m = mask ? mask->get() : nullptr;
  DeviceBuffer<float> lse(nrow);
  DeviceBuffer<double> attn(nbh), jac(nbh);
  Outputs o;
  if (path == Path::fused_bf16) {
    DeviceBuffer<uint16_t> Q(to_bf16(in.Q)), K(to_bf16(in.K)), V(to_bf16(in.V)), dO(to_bf16(in.dO));
    DeviceBuffer<uint16_t> O(nO), dQ(in.Q.size()), dK(in.K.size()), dV(in.V.size());
    attention_forward_cuda(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), m, O.get(), lse.get(), attn.get(),
                           jac.get(), ws, nullptr);
    attention_backward_cuda(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), m, O.get(), dO.get(), lse.get(),
                            dQ.get(), dK.get(), dV.get(), ws, nullptr);
    o.O = from_bf16(O.download());
    o.dQ = from_bf16(dQ.download());
    o.dK = from_bf16(dK.download());
    o.dV = from_bf16(dV.download());
  } else {
    DeviceBuffer<float> Q(in.Q), K(in.K), V(in.V), dO(in.dO);
    DeviceBuffer<float> O(nO), dQ(in.Q.size()), dK(in.K.size()), dV(in.V.size());
    if (path == Path::ref) {
      attention_forward_cuda_ref(in.spec, s, Q.get(), K.get(), V.get(), m, O.get(), lse.get(), attn.get(), jac.get(),
                                 ws, nullptr);
      attention_backward_cuda_ref(in.spec, s, Q.get(), K.get(), V.get(), m, O.get(), dO.get(), lse.get(), dQ.get(),
                                  dK.get(), dV.get(), ws, nullptr);
    } else {
      attention_forward_cuda(in.spec, s, CudaDType::f32, Q.get(), K.get(), V.get(), m, O.get(), lse.get(), attn.get(),
                             jac.get(), ws, nullptr);
      attention_backward_cuda(in.spec, s, CudaDType::f32, Q.get(), K.get(), V.get(), m, O.get(), dO.get(), lse.get(),
                              dQ.get(), dK.get(), dV.get(), ws, nullptr);
    }
    o.O = O.download();
    o.dQ = dQ.download();
    o.dK = dK.download();
    o.dV = dV.download();
  }
  o.lse = lse.download();
  o.attn_fro = attn.download();
  o.jac_fro = jac.download();
  return o;
}

// max |got - want| <= tol * max(max |want|, floor) + allow[i]: errors measured against
// the tensor's scale, since the activations' outputs span orders of magnitude. floor is
// the scale of the terms a tensor is made of, for tensors that are zero in exact
// arithmetic (softmax over one key: dQ = dK = 0 as the difference of two equal dot
// products); allow (may be empty) is a per-entry allowance for ReLU's kink (below).
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double tol,
                  double floor = 1e-6, const std::vector<double>& allow = {}) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = floor, worst = -1.0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - want[i]) - (allow.empty() ? 0.0 : allow[i]);
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst at [" << at << "] got " << (got.empty() ? 0.f : got[at]) << " want "
                                << (want.empty() ? 0.f : want[at]) << ", scale " << scale
                                << (allow.empty() ? "" : ", allowance there " + std::to_string(allow[at]));
}

// Scales and allowances of the gradients, from the inputs in float64.
// - grad_floor (used when Nk = 1): softmax's dQ, dK are sums of P_ij (dP_ij - D_i) terms; over one key
//   P = 1 and dP = D, so they are 0 up to the rounding of dP and D (eps |dO| |V| per
//   term, times |K| or |Q| and the score scale). floor = score_scale * max|dO| * max|V| *
//   max(|Q|, |K|): tol * floor then admits that rounding and nothing of the size of a
//   wrong term.
// - relu_kink_allowance: phi'(s) = c 1[s > 0] jumps at s = 0. Two float32 evaluations of a
//   score in different summation orders differ by up to ~d eps sum_k |q_k k_k|, so a score
//   within that of 0 may fall on either side; each such (i, j) may move dS_ij by c dP_ij,
//   hence dQ_i by scale c |dP_ij| |K_j| and dK_j by scale c |dP_ij| |Q_i|. Those
//   entries get exactly that allowance (zero elsewhere).
double grad_floor(const Inputs& in) {
  auto amax = [](const std::vector<float>& v) {
    double m = 0.0;
    for (float x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
    return m;
  };
  return attention_score_scale(in.spec, in.shape) * amax(in.dO) * amax(in.V) * std::max(amax(in.Q), amax(in.K));
}

void relu_kink_allowance(const Inputs& in, std::vector<double>& allow_dQ, std::vector<double>& allow_dK) {
  const AttentionShape& s = in.shape;
  const double scale = attention_score_scale(in.spec, s);
  allow_dQ.assign(in.Q.size(), 0.0);
  allow_dK.assign(in.K.size(), 0.0);
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* Q = in.Q.data() + (b * s.H + h) * s.Nq * s.d;
      const float* K = in.K.data() + (b * s.H + h) * s.Nk * s.d;
      const float* V = in.V.data() + (b * s.H + h) * s.Nk * s.dv;
      const float* dO = in.dO.data() + (b * s.H + h) * s.Nq * s.dv;
      double* aQ = allow_dQ.data() + (b * s.H + h) * s.Nq * s.d;
      double* aK = allow_dK.data() + (b * s.H + h) * s.Nk * s.d;
      for (int64_t i = 0; i < s.Nq; ++i) {
        // c for this row's attended keys (mask and causal), as the kernels resolve it.
        int64_t n = 0;
        const int64_t end = in.spec.causal ? std::clamp<int64_t>(i + (s.Nk - s.Nq) + 1, 0, s.Nk) : s.Nk;
        for (int64_t j = 0; j < end; ++j) n += in.mask.empty() || in.mask[b * s.Nk + j] != 0.0f;
        const double c = resolve_phi(in.spec.act, n).c;
        for (int64_t j = 0; j < end; ++j) {
          double dot = 0.0, mag = 0.0;
          for (int64_t k = 0; k < s.d; ++k) {
            dot += static_cast<double>(Q[i * s.d + k]) * K[j * s.d + k];
            mag += std::fabs(static_cast<double>(Q[i * s.d + k]) * K[j * s.d + k]);
          }
          if (std::fabs(dot) > 4.0 * static_cast<double>(s.d) * 6e-8 * mag) continue;
          double dP = 0.0;
          for (int64_t k = 0; k < s.dv; ++k) dP += static_cast<double>(dO[i * s.dv + k]) * V[j * s.dv + k];
          const double w = scale * c * std::fabs(dP);
          for (int64_t k = 0; k < s.d; ++k) {
            aQ[i * s.d + k] += w * std::fabs(K[j * s.d + k]);
            aK[j * s.d + k] += w * std::fabs(Q[i * s.d + k]);
          }
        }
      }
    }
}

void expect_norms_close(const std::string& what, const std::vector<double>& got, const std::vector<double>& want,
                        double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "]";
    EXPECT_NEAR(got[i], want[i], rtol * std::fabs(want[i]) + atol) << what << "[" << i << "]";
  }
}

// lse only for softmax and only where the row attends something (finite on the CPU);
// an empty row must be -inf on the GPU.
void expect_lse_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                      double tol) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isfinite(want[i]))
      EXPECT_NEAR(got[i], want[i], tol * (1.0 + std::fabs(want[i]))) << what << "[" << i << "]";
    else
      EXPECT_TRUE(std::isinf(got[i]) && got[i] < 0) << what << "[" << i << "] = " << got[i];
  }
}

// Tolerances.
// float32: the paths differ only in summation order (cuBLAS, tiles, OpenBLAS), so errors
//   are a few float32 ulps times sqrt(N) relative to the tensor's largest entry.
// bfloat16: the CPU gets the same bf16-rounded inputs, so input rounding cancels; what
//   remains is the rounding of the stored outputs O, dQ, dK, dV to bf16 (2^-9 relative),
//   D_i = dO . O computed from the rounded O in the softmax backward (an error of
//   2^-9 |D_i| in each dS entry), and (for a tensor-core P V) P rounded to bf16 before the
//   product: each term off by up to 2^-8 relative, accumulated in fp32 over N terms of
//   mixed sign, which stays below ~2^-8 of the largest |entry| in practice. 2e-2 covers
//   these with a margin. The norms are computed from fp32 scores in every path.
constexpr double kTolF32 = 2e-4;
constexpr double kTolBf16 = 2e-2;
constexpr double kNormRtol = 2e-4, kNormAtol = 2e-3;  // atol: sqrt near 0 (one-hot softmax rows)

void compare(const std::string& tag, const Outputs& got, const Outputs& want, const Inputs& in, bool softmax,
             double tol) {
  std::vector<double> allow_dQ, allow_dK;
  if (in.spec.act.activation == Activation::relu) relu_kink_allowance(in, allow_dQ, allow_dK);
  // Over one key softmax's dQ, dK vanish: only their rounding is left to compare.
  const double floor = softmax && in.shape.Nk == 1 ? grad_floor(in) : 1e-6;
  expect_close(tag + " O", got.O, want.O, tol);
  expect_close(tag + " dQ", got.dQ, want.dQ, tol, floor, allow_dQ);
  expect_close(tag + " dK", got.dK, want.dK, tol, floor, allow_dK);
  expect_close(tag + " dV", got.dV, want.dV, tol);
  if (softmax) expect_lse_close(tag + " lse", got.lse, want.lse, tol);
  expect_norms_close(tag + " attn_fro", got.attn_fro, want.attn_fro, kNormRtol, kNormAtol);
  expect_norms_close(tag + " jac_fro", got.jac_fro, want.jac_fro, kNormRtol, kNormAtol);
}

class AttentionCuda : public ::testing::TestWithParam<Case> {};

// bf16 outputs rounded to nearest, not truncated: the mean relative change of |O| over the
// entries at least 1 % of the largest (at least 256 of them) is within +-2^-11. Rounding to
// nearest (at most 2^-9 relative an entry, unbiased) and fp32's summation order average to
// about 0 (standard deviation 2^-9 / sqrt(3 n) <= 7e-5), while a store that truncates moves
// every entry towards zero by 2^-9 relative on average (2e-3). The tolerance of compare()
// (2e-2 of the largest entry) cannot tell the two apart.
void expect_rounded_to_nearest(const std::string& what, const std::vector<float>& got, const std::vector<float>& want) {
  double big = 0.0, sum = 0.0;
  for (float w : want) big = std::max(big, std::fabs(static_cast<double>(w)));
  int64_t n = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double w = std::fabs(static_cast<double>(want[i]));
    if (w == 0.0 || w < 1e-2 * big) continue;
    sum += (std::fabs(static_cast<double>(got[i])) - w) / w;
    ++n;
  }
  if (n < 256) return;
  EXPECT_LE(std::fabs(sum / n), std::ldexp(1.0, -11))
      << what << ": the mean relative change of |O| over " << n << " entries is " << sum / n
      << " (rounded to nearest: about 0; truncated: about -2^-9)";
}

TEST_P(AttentionCuda, RefAndFusedMatchCpu) {
  SKIP_WITHOUT_DEVICE();
  const Case& c = GetParam();
  const bool softmax = c.act.activation == Activation::softmax;
  Workspace ws = make_workspace();
  {
    const Inputs in = make_inputs(c, false);
    const Outputs cpu = run_cpu(in);
    compare("ref vs cpu", run_gpu(in, Path::ref, ws.get()), cpu, in, softmax, kTolF32);
    compare("fused f32 vs cpu", run_gpu(in, Path::fused_f32, ws.get()), cpu, in, softmax, kTolF32);
  }
  {
    const Inputs in = make_inputs(c, true);  // bf16-representable inputs for both sides
    const Outputs got = run_gpu(in, Path::fused_bf16, ws.get()), want = run_cpu(in);
    compare("fused bf16 vs cpu", got, want, in, softmax, kTolBf16);
    expect_rounded_to_nearest("fused bf16 O", got.O, want.O);
  }
}

// The registry's activations with their scales (kernels/activation.h), degrees 1 and 3.
std::vector<std::pair<std::string, ActivationSpec>> activations() {
  std::vector<std::pair<std::string, ActivationSpec>> v;
  for (const ActivationSpec& a : registry_test_specs())
    if (a.degree != 2) v.emplace_back(spec_token(a), a);
  return v;
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{1, 1},   {7, 7},   {129, 129}, {kLong, kLong},
                                                            {7, 129}, {129, 7}, {1, kLong}};
  for (const auto& [name, act] : activations())
    for (const auto& [nq, nk] : lengths)
      for (int64_t d : {16, 64, 128}) {
        if (d == 128 && nq == kLong) continue;  // d = 128 tiles are covered at 129 and 1 x kLong
        for (int m = 0; m < 4; ++m) cases.push_back({name, act, nq, nk, d, d, (m & 1) != 0, (m & 2) != 0});
      }
  // Shapes the fused kernels do not specialise: the materialising fallback (both dtypes).
  for (const auto& [name, act] : activations()) {
    cases.push_back({name, act, 33, 65, 48, 48, true, false});
    cases.push_back({name, act, 65, 33, 64, 32, false, true});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCuda, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

// Two runs of the same inputs give the same bits: the norms are reduced in a fixed order
// and the backward uses no atomics.
TEST(AttentionCudaDeterminism, BackwardAndNormsBitIdentical) {
  SKIP_WITHOUT_DEVICE();
  Workspace ws = make_workspace();
  for (const auto& [name, act] : activations()) {
    for (Path path : {Path::fused_f32, Path::fused_bf16, Path::ref}) {
      const Inputs in = make_inputs({name, act, 300, 513, 64, 64, true, true}, path == Path::fused_bf16);
      const Outputs a = run_gpu(in, path, ws.get());
      const Outputs b = run_gpu(in, path, ws.get());
      const std::string tag = name + " path " + std::to_string(static_cast<int>(path));
      auto same = [&](const auto& x, const auto& y, const char* what) {
        ASSERT_EQ(x.size(), y.size());
        EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0]))) << tag << " " << what;
      };
      same(a.O, b.O, "O");
      same(a.dQ, b.dQ, "dQ");
      same(a.dK, b.dK, "dK");
      same(a.dV, b.dV, "dV");
      same(a.attn_fro, b.attn_fro, "attn_fro");
      same(a.jac_fro, b.jac_fro, "jac_fro");
    }
  }
}

// Theorem 4.1 with the tight Jacobian constant (science.md): per head,
// ||softmax(S)||_F <= sqrt(rows) and ||J||_F <= sqrt(rows) / 2, on peaked inputs too.
TEST(AttentionCudaNorms, SoftmaxBoundsHoldOnPeakedScores) {
  SKIP_WITHOUT_DEVICE();
  Workspace ws = make_workspace();
  Case c{"softmax", ActivationSpec{}, 257, 257, 64, 64, false, false};
  Inputs in = make_inputs(c, false);
  in.spec.score_scale = 4.0f;  // large scores: nearly one-hot rows
  const Outputs o = run_gpu(in, Path::fused_f32, ws.get());
  for (size_t i = 0; i < o.attn_fro.size(); ++i) {
    EXPECT_LE(o.attn_fro[i], std::sqrt(257.0) * (1 + 1e-6));
    EXPECT_LE(o.jac_fro[i], std::sqrt(257.0) / 2 * (1 + 1e-6));
    EXPECT_GT(o.attn_fro[i], 0.0);
  }
}

// ---- tensor-core forward (attention_forward_cuda_mma, issue #19) ------------------------
// Against the CPU reference on the same rounded inputs, for every activation (and a poly
// degree the kernels have no specialisation for), bf16 and fp16, d = 64 and 128, no mask /
// causal / key mask (with a batch item that attends nothing) / both, partial tiles and
// Nq != Nk (causal rows that attend nothing when Nk < Nq). Outputs are poisoned (NaN)
// first, so every element must be written. ||O - O_cpu||_F / ||O_cpu||_F <= 1e-2 (bf16),
// 2e-3 (fp16); norms within 1e-3 relative; lse; two runs bit-identical.

// IEEE half on the host: round to nearest even (normal and subnormal range; the tests'
// values are far from overflow).
uint16_t to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (!(a < 65520.0f)) return static_cast<uint16_t>(sign | (a != a ? 0x7e00u : 0x7c00u));
  if (a < 6.103515625e-05f) {  // subnormal: multiples of 2^-24
    const float q = std::nearbyint(a * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(q));
  }
  uint32_t ua;
  std::memcpy(&ua, &a, 4);
  const uint32_t exp = (ua >> 23) - 127 + 15, man = ua & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carries into the exponent correctly
  return static_cast<uint16_t>(sign | h);
}
float from_f16(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(man), -24);
  } else if (exp == 31) {
    f = man ? NAN : INFINITY;
  } else {
    const uint32_t u = ((exp - 15 + 127) << 23) | (man << 13);
    std::memcpy(&f, &u, 4);
  }
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u |= sign;
  std::memcpy(&f, &u, 4);
  return f;
}

// Host-only (no GPU needed; runs in the CPU suite): the fp16 helpers the mma tests use.
TEST(HalfFloatHost, RoundTrip) {
  for (float x : {0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159f, -1e-3f})
    EXPECT_NEAR(from_f16(to_f16(x)), x, 1e-3 * std::fabs(x) + 6e-8) << x;
  EXPECT_EQ(to_f16(1.0009765625f), 0x3c01);   // 1 + 2^-10: exact
  EXPECT_EQ(to_f16(1.00048828125f), 0x3c00);  // 1 + 2^-11: a tie, to even
  EXPECT_EQ(to_f16(5.9604645e-08f), 0x0001);  // 2^-24: the smallest subnormal
  EXPECT_EQ(to_f16(1.0f), 0x3c00);
  EXPECT_EQ(to_f16(-2.0f), 0xc000);
}

struct MmaCase {
  std::string act_name;
  ActivationSpec act;
  int64_t Nq, Nk, d;
  bool key_mask, causal;
  bool f16;
};

std::string mma_case_name(const MmaCase& c) {
  Case base{c.act_name, c.act, c.Nq, c.Nk, c.d, c.d, c.key_mask, c.causal};
  return case_name(base) + (c.f16 ? "_f16" : "_bf16");
}

struct MmaOut {
  std::vector<float> O, lse;
  std::vector<double> attn_fro, jac_fro;
};

// Inputs rounded to the kernel's type (both sides see the same values).
Inputs make_mma_inputs(const MmaCase& c) {
  Inputs in = make_inputs({c.act_name, c.act, c.Nq, c.Nk, c.d, c.d, c.key_mask, c.causal}, false);
  for (auto* v : {&in.Q, &in.K, &in.V})
    for (float& x : *v) x = c.f16 ? from_f16(to_f16(x)) : from_bf16(to_bf16(x));
  return in;
}

MmaOut run_mma(const Inputs& in, bool f16, AttentionCudaWorkspace* ws) {
  const AttentionShape& s = in.shape;
  auto enc = [&](const std::vector<float>& x) {
    std::vector<uint16_t> r(x.size());
    for (size_t i = 0; i < x.size(); ++i) r[i] = f16 ? to_f16(x[i]) : to_bf16(x[i]);
    return r;
  };
  const int64_t nO = s.B * s.H * s.Nq * s.dv, nrow = s.B * s.H * s.Nq, nbh = s.B * s.H;
  std::unique_ptr<DeviceBuffer<float>> mask;
  if (!in.mask.empty()) mask = std::make_unique<DeviceBuffer<float>>(in.mask);
  DeviceBuffer<uint16_t> Q(enc(in.Q)), K(enc(in.K)), V(enc(in.V));
  // Poison: 0xffff is a NaN in bf16 and in fp16; NaN for lse and the norms.
  DeviceBuffer<uint16_t> O(std::vector<uint16_t>(nO, 0xffffu));
  DeviceBuffer<float> lse(std::vector<float>(nrow, NAN));
  DeviceBuffer<double> attn(std::vector<double>(nbh, NAN)), jac(std::vector<double>(nbh, NAN));
  attention_forward_cuda_mma(in.spec, s, f16 ? CudaDType::f16 : CudaDType::bf16, Q.get(), K.get(), V.get(),
                             mask ? mask->get() : nullptr, O.get(), lse.get(), attn.get(), jac.get(), ws, nullptr);
  MmaOut o;
  const std::vector<uint16_t> oh = O.download();
  o.O.resize(oh.size());
  for (size_t i = 0; i < oh.size(); ++i) o.O[i] = f16 ? from_f16(oh[i]) : from_bf16(oh[i]);
  o.lse = lse.download();
  o.attn_fro = attn.download();
  o.jac_fro = jac.download();
  return o;
}

class AttentionCudaMma : public ::testing::TestWithParam<MmaCase> {};

TEST_P(AttentionCudaMma, ForwardMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  const MmaCase& c = GetParam();
  const bool softmax = c.act.activation == Activation::softmax;
  static Workspace ws = make_workspace();  // one for all cases: cuBLAS start-up is slow
  const Inputs in = make_mma_inputs(c);
  const AttentionShape& s = in.shape;
  std::vector<float> O(s.B * s.H * s.Nq * s.dv), lse(s.B * s.H * s.Nq);
  std::vector<double> attn(s.B * s.H), jac(s.B * s.H);
  attention_forward_cpu(in.spec, s, in.Q.data(), in.K.data(), in.V.data(), in.mask.empty() ? nullptr : in.mask.data(),
                        O.data(), lse.data(), attn.data(), jac.data());
  const MmaOut got = run_mma(in, c.f16, ws.get());
  // O against the float64 reference (the inputs are the kernel's 16-bit values), and
  // against the CPU kernel (float32) with the same bound.
  auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  const std::vector<double> O64 =
      reference(in.spec, s, wide(in.Q), wide(in.K), wide(in.V), wide(in.mask), {}, /*jacobian=*/false).O;
  for (const bool f64 : {true, false}) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < O.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got.O[i])) << "O[" << i << "] = " << got.O[i] << " (unwritten or overflow)";
      const double want = f64 ? O64[i] : O[i];
      num += (static_cast<double>(got.O[i]) - want) * (static_cast<double>(got.O[i]) - want);
      den += want * want;
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LE(rel, c.f16 ? 2e-3 : 1e-2) << (f64 ? "||O - O_f64|| / ||O_f64||" : "||O - O_cpu|| / ||O_cpu||");
  }
  if (softmax) expect_lse_close("lse", got.lse, lse, 1e-3);
  expect_norms_close("attn_fro", got.attn_fro, attn, 1e-3, 1e-3);
  expect_norms_close("jac_fro", got.jac_fro, jac, 1e-3, 1e-3);
  const MmaOut again = run_mma(in, c.f16, ws.get());
  EXPECT_EQ(0, std::memcmp(got.O.data(), again.O.data(), got.O.size() * sizeof(float))) << "O not bit-identical";
  EXPECT_EQ(0, std::memcmp(got.attn_fro.data(), again.attn_fro.data(), got.attn_fro.size() * sizeof(double)));
  EXPECT_EQ(0, std::memcmp(got.jac_fro.data(), again.jac_fro.data(), got.jac_fro.size() * sizeof(double)));
}

// fp16's range (65504) against unnormalised element-wise phi: P = phi(S) is rounded to
// fp16 for the P V product (attention_mma.cuh), so an unscaled cubic with scores near 50
// (phi = 1.25e5) overflows to inf. The kernels do not guard it: the result is non-finite,
// never a finite wrong number, so a trainer would report the cell as diverged; bf16 (float's
// range) and the scaled activations at the trainer's scores stay finite. The trainer
// offers no fp16 (the precision key is fp32, tf32 or bf16).
TEST(AttentionCudaMma, F16OverflowOfUnscaledPolyIsNonFiniteNotWrong) {
  SKIP_WITHOUT_DEVICE();
  static Workspace ws = make_workspace();
  for (const bool f16 : {true, false}) {
    ActivationSpec cubic;
    cubic.activation = Activation::poly;
    cubic.degree = 3;
    cubic.scale = ScaleKind::none;
    MmaCase c{"poly3_none", cubic, 64, 64, 64, false, false, f16};
    Inputs in = make_mma_inputs(c);
    in.spec.score_scale = 1.0f;  // not 1/sqrt(d)
    // Every score q . k = 64 * 0.875^2 = 49 (exact in both types): phi = 1.18e5.
    for (auto* v : {&in.Q, &in.K}) std::fill(v->begin(), v->end(), 0.875f);
    for (float& x : in.V) x = 0.5f;
    const MmaOut got = run_mma(in, f16, ws.get());
    size_t finite = 0;
    for (float o : got.O) finite += std::isfinite(o);
    if (f16) {
      EXPECT_EQ(finite, 0u) << "fp16: every output overflowed (phi = 1.18e5 > 65504)";
    } else {
      EXPECT_EQ(finite, got.O.size()) << "bf16 has float's range";
      const float want = 64 * 0.5f * 49 * 49 * 49;
      EXPECT_NEAR(got.O[0], want, 1e-2 * want);
    }
  }
}

std::vector<MmaCase> mma_cases() {
  auto acts = activations();
  ActivationSpec p4;
  p4.activation = Activation::poly;
  p4.degree = 4;  // run-time degree: no specialisation
  p4.scale = ScaleKind::inv_n;
  acts.push_back({"poly4_inv_n", p4});
  std::vector<MmaCase> cases;
  const std::vector<std::pair<int64_t, int64_t>> lengths = {{129, 129}, {kLong, kLong}, {7, 300}, {300, 7}};
  for (const auto& [name, act] : acts)
    for (const auto& [nq, nk] : lengths)
      for (int64_t d : {64, 128})
        for (int m = 0; m < 4; ++m)
          for (bool f16 : {false, true}) cases.push_back({name, act, nq, nk, d, (m & 1) != 0, (m & 2) != 0, f16});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudaMma, ::testing::ValuesIn(mma_cases()),
                         [](const ::testing::TestParamInfo<MmaCase>& info) { return mma_case_name(info.param); });

// The mma forward's O and lse drive the existing fused backward (bf16): the gradients
// match the CPU's as the fused forward's do.
TEST(AttentionCudaMma, BackwardFromMmaForward) {
  SKIP_WITHOUT_DEVICE();
  Workspace ws = make_workspace();
  for (const auto& [name, act] : activations()) {
    const Case c{name, act, 300, 513, 64, 64, true, true};
    const Inputs in = make_inputs(c, true);
    const AttentionShape& s = in.shape;
    const Outputs cpu = run_cpu(in);
    DeviceBuffer<uint16_t> Q(to_bf16(in.Q)), K(to_bf16(in.K)), V(to_bf16(in.V)), dO(to_bf16(in.dO));
    DeviceBuffer<uint16_t> O(s.B * s.H * s.Nq * s.dv), dQ(in.Q.size()), dK(in.K.size()), dV(in.V.size());
    DeviceBuffer<float> mask(in.mask), lse(s.B * s.H * s.Nq);
    attention_forward_cuda_mma(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), mask.get(), O.get(), lse.get(),
                               nullptr, nullptr, ws.get(), nullptr);
    attention_backward_cuda(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), mask.get(), O.get(), dO.get(),
                            lse.get(), dQ.get(), dK.get(), dV.get(), ws.get(), nullptr);
    std::vector<double> allow_dQ, allow_dK;
    if (act.activation == Activation::relu) relu_kink_allowance(in, allow_dQ, allow_dK);
    expect_close(name + " O", from_bf16(O.download()), cpu.O, kTolBf16);
    expect_close(name + " dQ", from_bf16(dQ.download()), cpu.dQ, kTolBf16, 1e-6, allow_dQ);
    expect_close(name + " dK", from_bf16(dK.download()), cpu.dK, kTolBf16, 1e-6, allow_dK);
    expect_close(name + " dV", from_bf16(dV.download()), cpu.dV, kTolBf16);
  }
}

// The tensor-core backward (attention_backward_cuda_mma, bf16) from the tensor-core
// forward's O and lse, against the CPU: the tolerances of the fused bf16 path, gradients
// poisoned first, two runs bit-identical (no atomics).
struct MmaBwdCase {
  std::string act_name;
  ActivationSpec act;
  int64_t Nq, Nk, d;
  bool key_mask, causal;
};

class AttentionCudaMmaBwd : public ::testing::TestWithParam<MmaBwdCase> {};

TEST_P(AttentionCudaMmaBwd, BackwardMatchesCpu) {
  SKIP_WITHOUT_DEVICE();
  const MmaBwdCase& c = GetParam();
  static Workspace ws = make_workspace();
  const Case base{c.act_name, c.act, c.Nq, c.Nk, c.d, c.d, c.key_mask, c.causal};
  const Inputs in = make_inputs(base, true);
  const AttentionShape& s = in.shape;
  const bool softmax = c.act.activation == Activation::softmax;
  const Outputs cpu = run_cpu(in);
  std::unique_ptr<DeviceBuffer<float>> mask;
  if (!in.mask.empty()) mask = std::make_unique<DeviceBuffer<float>>(in.mask);
  const float* m = mask ? mask->get() : nullptr;
  DeviceBuffer<uint16_t> Q(to_bf16(in.Q)), K(to_bf16(in.K)), V(to_bf16(in.V)), dO(to_bf16(in.dO));
  DeviceBuffer<uint16_t> O(s.B * s.H * s.Nq * s.dv);
  DeviceBuffer<float> lse(s.B * s.H * s.Nq);
  attention_forward_cuda_mma(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), m, O.get(), lse.get(), nullptr,
                             nullptr, ws.get(), nullptr);
  auto backward = [&](std::vector<float>& gq, std::vector<float>& gk, std::vector<float>& gv) {
    DeviceBuffer<uint16_t> dQ(std::vector<uint16_t>(in.Q.size(), 0xffffu));
    DeviceBuffer<uint16_t> dK(std::vector<uint16_t>(in.K.size(), 0xffffu));
    DeviceBuffer<uint16_t> dV(std::vector<uint16_t>(in.V.size(), 0xffffu));
    attention_backward_cuda_mma(in.spec, s, CudaDType::bf16, Q.get(), K.get(), V.get(), m, O.get(), dO.get(), lse.get(),
                                dQ.get(), dK.get(), dV.get(), ws.get(), nullptr);
    gq = from_bf16(dQ.download());
    gk = from_bf16(dK.download());
    gv = from_bf16(dV.download());
  };
  std::vector<float> gq, gk, gv, gq2, gk2, gv2;
  backward(gq, gk, gv);
  std::vector<double> allow_dQ, allow_dK;
  if (c.act.activation == Activation::relu) relu_kink_allowance(in, allow_dQ, allow_dK);
  const double floor = softmax && s.Nk == 1 ? grad_floor(in) : 1e-6;
  expect_close("mma dQ", gq, cpu.dQ, kTolBf16, floor, allow_dQ);
  expect_close("mma dK", gk, cpu.dK, kTolBf16, floor, allow_dK);
  expect_close("mma dV", gv, cpu.dV, kTolBf16);
  backward(gq2, gk2, gv2);
  EXPECT_EQ(0, std::memcmp(gq.data(), gq2.data(), gq.size() * sizeof(float))) << "dQ not bit-identical";
  EXPECT_EQ(0, std::memcmp(gk.data(), gk2.data(), gk.size() * sizeof(float))) << "dK not bit-identical";
  EXPECT_EQ(0, std::memcmp(gv.data(), gv2.data(), gv.size() * sizeof(float))) << "dV not bit-identical";
}

std::vector<MmaBwdCase> mma_bwd_cases() {
  std::vector<MmaBwdCase> cases;
  auto acts = activations();
  ActivationSpec p4;
  p4.activation = Activation::poly;
  p4.degree = 4;
  p4.scale = ScaleKind::inv_n;
  acts.push_back({"poly4_inv_n", p4});
  for (const auto& [name, act] : acts)
    for (int64_t d : {64, 128}) {
      cases.push_back({name, act, 129, 129, d, false, false});
      cases.push_back({name, act, 129, 129, d, true, true});
      cases.push_back({name, act, 300, 513, d, true, true});
      cases.push_back({name, act, 300, 7, d, false, true});
      cases.push_back({name, act, kLong, kLong, d, false, false});
    }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionCudaMmaBwd, ::testing::ValuesIn(mma_bwd_cases()),
                         [](const ::testing::TestParamInfo<MmaBwdCase>& info) {
                           const MmaBwdCase& c = info.param;
                           return case_name({c.act_name, c.act, c.Nq, c.Nk, c.d, c.d, c.key_mask, c.causal});
                         });

// fp16 reaches the tensor-core forward through attention_forward_cuda; shapes it does not
// cover, and the fp16 backward, are refused.
TEST(AttentionCudaMma, F16Routing) {
  SKIP_WITHOUT_DEVICE();
  Workspace ws = make_workspace();
  AttentionSpec spec;
  AttentionShape sh;
  sh.Nq = sh.Nk = 16;
  sh.d = sh.dv = 32;
  DeviceBuffer<uint16_t> X(sh.Nq * sh.d), O(sh.Nq * sh.d);
  EXPECT_THROW(attention_forward_cuda(spec, sh, CudaDType::f16, X.get(), X.get(), X.get(), nullptr, O.get(), nullptr,
                                      nullptr, nullptr, ws.get(), nullptr),
               std::invalid_argument);
  EXPECT_THROW(attention_backward_cuda(spec, sh, CudaDType::f16, X.get(), X.get(), X.get(), nullptr, O.get(), O.get(),
                                       nullptr, O.get(), O.get(), O.get(), ws.get(), nullptr),
               std::invalid_argument);
}

}  // namespace
}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
