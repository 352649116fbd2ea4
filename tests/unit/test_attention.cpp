// CPU attention against an independent float64 reference written plainly here
// (materialised S, phi(S), P V; backward by the chain rule, softmax through its
// Jacobian), the reference against central finite differences, and the norm bounds of
// Theorem 4.1. Every case prints its full parameter string when it fails.
#include "kernels/attention.h"
#include "kernels/cpu/gemm.h"
#include "tests/unit/attention_reference.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attnsweep {
namespace {

// ---- cases ----------------------------------------------------------------------------

std::string act_name(const ActivationSpec& a) {
  return spec_token(a);
}

// Every activation of the registry, with its degrees and scales.
std::vector<ActivationSpec> all_activations() {
  return registry_test_specs();
}

struct ShapeCase {
  AttentionShape sh;
  bool mask = false;
  bool causal = false;
};

std::vector<ShapeCase> all_shapes() {
  return {
      {{1, 1, 1, 1, 1, 1}, false, false},          // N = 1, d = 1
      {{2, 1, 7, 7, 16, 16}, true, false},         // key mask (batch 1 fully padded)
      {{1, 2, 7, 13, 16, 8}, false, true},         // Nq < Nk, causal
      {{2, 1, 13, 7, 16, 16}, true, true},         // Nq > Nk causal: leading rows attend nothing
      {{1, 2, 129, 129, 64, 64}, false, false},    // d = 64
      {{1, 2, 300, 280, 16, 16}, true, true},      // two query blocks (256 rows + 44), mask + causal
      {{2, 1, 129, 65, 64, 32}, true, true},       // mask + causal, dv != d
      {{1, 1, 1000, 1000, 64, 64}, false, false},  // N = 1000: 8 blocks of 128 rows
      {{1, 1, 70, 1000, 16, 16}, true, false},     // long masked rows
  };
}

std::string shape_name(const ShapeCase& c) {
  std::ostringstream o;
  o << "B" << c.sh.B << "_H" << c.sh.H << "_Nq" << c.sh.Nq << "_Nk" << c.sh.Nk << "_d" << c.sh.d << "_dv" << c.sh.dv
    << (c.mask ? "_mask" : "") << (c.causal ? "_causal" : "");
  return o.str();
}

struct Inputs {
  std::vector<float> q, k, v, dO, mask;
};

Inputs random_inputs(const ShapeCase& c, uint32_t seed) {
  const AttentionShape& s = c.sh;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Inputs in;
  auto fill = [&](std::vector<float>& x, int64_t n) {
    x.resize(n);
    for (auto& e : x) e = nd(rng);
  };
  fill(in.q, s.B * s.H * s.Nq * s.d);
  fill(in.k, s.B * s.H * s.Nk * s.d);
  fill(in.v, s.B * s.H * s.Nk * s.dv);
  fill(in.dO, s.B * s.H * s.Nq * s.dv);
  if (c.mask) {
    in.mask.resize(s.B * s.Nk);
    std::bernoulli_distribution keep(0.75);
    for (auto& m : in.mask) m = keep(rng) ? 1.0f : 0.0f;
    in.mask[0] = 1.0f;
    if (s.B > 1)  // the second batch item is all padding: its rows attend nothing
      std::fill(in.mask.begin() + s.Nk, in.mask.begin() + 2 * s.Nk, 0.0f);
  }
  return in;
}

std::vector<double> to_double(const std::vector<float>& x) {
  return {x.begin(), x.end()};
}

// An output buffer filled with NaN (so anything left unwritten fails the finite check)
// and followed by guard values that an out-of-bounds write would change (ggml style).
template <class T>
struct Guarded {
  static constexpr int64_t kGuard = 67;
  static constexpr T kGuardValue = T(-12345.678);
  std::vector<T> buf;
  int64_t n;
  explicit Guarded(int64_t n_) : buf(n_ + kGuard, T(NAN)), n(n_) { std::fill(buf.begin() + n, buf.end(), kGuardValue); }
  T* data() { return buf.data(); }
  bool guard_ok() const {
    for (int64_t i = n; i < n + kGuard; ++i)
      if (!(buf[i] == kGuardValue)) return false;
    return true;
  }
};

// Relative error of got against ref: max(||got-ref||_2 / ||ref||_2, max|got-ref| / max|ref|).
// Non-finite values are reported first. ref == 0 demands got == 0.
template <class T>
::testing::AssertionResult close(const char* what, const T* got, const std::vector<double>& ref, double tol) {
  double num = 0, den = 0, maxerr = 0, maxref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    if (!std::isfinite(g))
      return ::testing::AssertionFailure() << what << ": non-finite value " << g << " at index " << i;
    const double e = std::abs(g - ref[i]);
    num += e * e;
    den += ref[i] * ref[i];
    maxerr = std::max(maxerr, e);
    maxref = std::max(maxref, std::abs(ref[i]));
  }
  if (den == 0.0) {
    if (num == 0.0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": reference is 0 but max |got| = " << maxerr;
  }
  const double rel = std::max(std::sqrt(num / den), maxerr / maxref);
  if (rel <= tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative error " << rel << " > tolerance " << tol
                                       << " (max abs err " << maxerr << ", max |ref| " << maxref << ")";
}

struct KernelOut {
  Guarded<float> O, lse, dQ, dK, dV;
  Guarded<double> attn, jac;
  explicit KernelOut(const AttentionShape& s)
      : O(s.B * s.H * s.Nq * s.dv),
        lse(s.B * s.H * s.Nq),
        dQ(s.B * s.H * s.Nq * s.d),
        dK(s.B * s.H * s.Nk * s.d),
        dV(s.B * s.H * s.Nk * s.dv),
        attn(s.B * s.H),
        jac(s.B * s.H) {}
};

void run_kernel(const AttentionSpec& spec, const ShapeCase& c, const Inputs& in, KernelOut& out) {
  const float* mask = c.mask ? in.mask.data() : nullptr;
  attention_forward_cpu(spec, c.sh, in.q.data(), in.k.data(), in.v.data(), mask, out.O.data(), out.lse.data(),
                        out.attn.data(), out.jac.data());
  attention_backward_cpu(spec, c.sh, in.q.data(), in.k.data(), in.v.data(), mask, out.O.data(), in.dO.data(),
                         out.lse.data(), out.dQ.data(), out.dK.data(), out.dV.data());
}

// Tolerance for float32 kernels against the float64 reference. Inputs are exact in both;
// the kernel rounds each product and sum to float32 (eps = 1.19e-7): an SGEMM over K
// terms errs by about sqrt(K) eps relative to the terms' magnitude, phi adds a few ulp
// (fast_expf ~2 ulp, s^3 three roundings) and the backward chains such products (dP, dS,
// then dQ/dK/dV). So the relative error grows like eps sqrt(Nk + d + dv). Observed worst
// over all cases: 7.8e-7 at Nk = 1000 (tolerance 3.2e-5), 6.9e-8 at N = 1 (1.6e-6): a
// 20-40x margin, while one wrong row in 129 gives > 1e-2 and a wrong scale N far more.
double tolerance(const AttentionShape& s) {
  return 8 * 1.19e-7 * std::sqrt(static_cast<double>(s.Nk + s.d + s.dv));
}

struct Case {
  ActivationSpec act;
  ShapeCase shape;
};

std::string case_name(const Case& c) {
  return act_name(c.act) + "__" + shape_name(c.shape);
}
void PrintTo(const Case& c, std::ostream* os) {
  *os << case_name(c);
}  // gtest prints this on failure

void check_vs_reference(const Case& c) {
  SCOPED_TRACE("case: " + case_name(c));
  AttentionSpec spec;
  spec.act = c.act;
  spec.causal = c.shape.causal;
  const Inputs in = random_inputs(c.shape, 1234);
  const Ref ref = reference(spec, c.shape.sh, to_double(in.q), to_double(in.k), to_double(in.v), to_double(in.mask),
                            to_double(in.dO));
  KernelOut out(c.shape.sh);
  run_kernel(spec, c.shape, in, out);
  const double tol = tolerance(c.shape.sh);
  EXPECT_TRUE(close("O", out.O.data(), ref.O, tol));
  EXPECT_TRUE(close("attn_fro", out.attn.data(), ref.attn, tol));
  EXPECT_TRUE(close("jac_fro", out.jac.data(), ref.jac, tol));
  EXPECT_TRUE(close("dQ", out.dQ.data(), ref.dQ, tol));
  EXPECT_TRUE(close("dK", out.dK.data(), ref.dK, tol));
  EXPECT_TRUE(close("dV", out.dV.data(), ref.dV, tol));
  for (auto [name, ok] : {std::pair{"O", out.O.guard_ok()},
                          {"lse", out.lse.guard_ok()},
                          {"dQ", out.dQ.guard_ok()},
                          {"dK", out.dK.guard_ok()},
                          {"dV", out.dV.guard_ok()},
                          {"attn_fro", out.attn.guard_ok()},
                          {"jac_fro", out.jac.guard_ok()}})
    EXPECT_TRUE(ok) << "write past the end of " << name;
}

class AttentionVsReference : public ::testing::TestWithParam<Case> {};

// The products through our AVX-512 GEMM tiles where the CPU has them (own_gemms in
// kernels/cpu/attention.cpp), else OpenBLAS.
TEST_P(AttentionVsReference, ForwardBackwardNorms) {
  check_vs_reference(GetParam());
}

// The same cases through OpenBLAS (the path of CPUs without AVX-512, and of
// ATTNSWEEP_CPU_GEMM=openblas), so that both paths stay tested on an AVX-512 machine.
TEST_P(AttentionVsReference, ForwardBackwardNormsOpenBlas) {
  const cpu::GemmPath saved = cpu::gemm_path();
  cpu::set_gemm_path(cpu::GemmPath::OpenBlas);
  check_vs_reference(GetParam());
  cpu::set_gemm_path(saved);
}

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const auto& a : all_activations())
    for (const auto& s : all_shapes()) v.push_back({a, s});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllActivationsShapes, AttentionVsReference, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// ---- the reference's backward against central finite differences ------------------------

class ReferenceVsFiniteDifferences : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceVsFiniteDifferences, Gradients) {
  const Case& c = GetParam();
  SCOPED_TRACE("case: " + case_name(c));
  AttentionSpec spec;
  spec.act = c.act;
  spec.causal = c.shape.causal;
  const Inputs in = random_inputs(c.shape, 99);
  std::vector<double> q = to_double(in.q), k = to_double(in.k), v = to_double(in.v), mask = to_double(in.mask),
                      dO = to_double(in.dO);
  const Ref ref = reference(spec, c.shape.sh, q, k, v, mask, dO);
  // L = sum(O * dO), so dL/dX is what the backward computes from dO.
  auto loss = [&]() {
    const Ref r = reference(spec, c.shape.sh, q, k, v, mask, {});
    double l = 0;
    for (size_t i = 0; i < r.O.size(); ++i) l += r.O[i] * dO[i];
    return l;
  };
  // Central differences in float64: truncation ~h^2 |L'''| ~ 1e-10, rounding ~1e-16/h;
  // 1e-6 relative to the largest gradient leaves ample margin and catches any real error.
  const double h = 1e-5;
  auto check = [&](const char* what, std::vector<double>& x, const std::vector<double>& grad) {
    std::vector<double> fd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double x0 = x[i];
      x[i] = x0 + h;
      const double lp = loss();
      x[i] = x0 - h;
      const double lm = loss();
      x[i] = x0;
      fd[i] = (lp - lm) / (2 * h);
    }
    EXPECT_TRUE(close(what, grad.data(), fd, 1e-6));
  };
  check("dQ", q, ref.dQ);
  check("dK", k, ref.dK);
  check("dV", v, ref.dV);
}

std::vector<Case> fd_cases() {
  const std::vector<ShapeCase> shapes = {
      {{1, 1, 3, 4, 3, 2}, false, false},
      {{2, 1, 4, 5, 2, 3}, true, false},
      {{1, 2, 5, 3, 2, 2}, false, true},  // Nq > Nk causal
  };
  std::vector<Case> v;
  for (const auto& a : all_activations())
    for (const auto& s : shapes) v.push_back({a, s});
  return v;
}

INSTANTIATE_TEST_SUITE_P(AllActivations, ReferenceVsFiniteDifferences, ::testing::ValuesIn(fd_cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// ---- properties ---------------------------------------------------------------------------

// A padded batch behaves exactly like the unpadded one: N of the scale and of the sigmoid
// bias is the number of attended keys, padded keys get no gradient.
TEST(Attention, PaddingIsInvisible) {
  for (const auto& a : all_activations()) {
    SCOPED_TRACE("activation: " + act_name(a));
    AttentionSpec spec;
    spec.act = a;
    const ShapeCase small{{1, 2, 9, 10, 8, 8}, false, false};
    ShapeCase padded = small;
    padded.sh.Nk = 13;
    padded.mask = true;
    const Inputs in = random_inputs(small, 7);
    Inputs pin = random_inputs(padded, 8);  // padding keys/values are garbage
    for (int64_t bh = 0; bh < 2; ++bh) {
      std::copy_n(in.k.begin() + bh * 10 * 8, 10 * 8, pin.k.begin() + bh * 13 * 8);
      std::copy_n(in.v.begin() + bh * 10 * 8, 10 * 8, pin.v.begin() + bh * 13 * 8);
    }
    pin.q = in.q;
    pin.dO = in.dO;
    pin.mask.assign(13, 1.0f);
    std::fill(pin.mask.begin() + 10, pin.mask.end(), 0.0f);
    KernelOut o1(small.sh), o2(padded.sh);
    run_kernel(spec, small, in, o1);
    run_kernel(spec, padded, pin, o2);
    for (int64_t i = 0; i < 2 * 9 * 8; ++i) {
      EXPECT_NEAR(o1.O.buf[i], o2.O.buf[i], 1e-5 * (1 + std::abs(o1.O.buf[i])));
      EXPECT_NEAR(o1.dQ.buf[i], o2.dQ.buf[i], 1e-5 * (1 + std::abs(o1.dQ.buf[i])));
    }
    for (int64_t bh = 0; bh < 2; ++bh) {
      EXPECT_NEAR(o1.attn.buf[bh], o2.attn.buf[bh], 1e-6 * o1.attn.buf[bh]);
      EXPECT_NEAR(o1.jac.buf[bh], o2.jac.buf[bh], 1e-6 * o1.jac.buf[bh]);
      for (int64_t j = 0; j < 13 * 8; ++j) {
        const float gk = o2.dK.buf[bh * 13 * 8 + j], gv = o2.dV.buf[bh * 13 * 8 + j];
        if (j >= 10 * 8) {
          EXPECT_EQ(gk, 0.0f);
          EXPECT_EQ(gv, 0.0f);
        } else {
          EXPECT_NEAR(gk, o1.dK.buf[bh * 10 * 8 + j], 1e-5 * (1 + std::abs(gk)));
          EXPECT_NEAR(gv, o1.dV.buf[bh * 10 * 8 + j], 1e-5 * (1 + std::abs(gv)));
        }
      }
    }
  }
}

// Norms and outputs do not depend on the thread count (fixed reduction order), and
// collect_norms = false leaves the norm buffers alone and the outputs unchanged.
TEST(Attention, DeterministicAcrossThreadsAndNormsOff) {
  const ShapeCase c{{3, 1, 600, 77, 16, 16}, true, true};  // 3 query blocks per head
  const Inputs in = random_inputs(c, 5);
  for (const auto& a : all_activations()) {
    SCOPED_TRACE("activation: " + act_name(a));
    AttentionSpec spec;
    spec.act = a;
    spec.causal = true;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    KernelOut o1(c.sh);
    run_kernel(spec, c, in, o1);
    omp_set_num_threads(2);
    KernelOut o2(c.sh);
    run_kernel(spec, c, in, o2);
    spec.collect_norms = false;
    KernelOut o3(c.sh);
    run_kernel(spec, c, in, o3);
    omp_set_num_threads(saved);
    EXPECT_EQ(0, std::memcmp(o1.attn.data(), o2.attn.data(), 3 * sizeof(double)));  // bitwise
    EXPECT_EQ(0, std::memcmp(o1.jac.data(), o2.jac.data(), 3 * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(o1.O.data(), o2.O.data(), o1.O.n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(o1.dK.data(), o2.dK.data(), o1.dK.n * sizeof(float)));
    // Without the norms the fused loop is compiled differently (the compiler may share
    // or not share exp between phi and phi', vector widths differ): equal to a few ulp.
    for (int64_t i = 0; i < o1.O.n; ++i) EXPECT_NEAR(o1.O.buf[i], o3.O.buf[i], 1e-6 * (1 + std::abs(o1.O.buf[i])));
    EXPECT_EQ(0, std::memcmp(o1.dQ.data(), o3.dQ.data(), o1.dQ.n * sizeof(float)));  // backward: same code
    for (int i = 0; i < 3; ++i) {
      EXPECT_TRUE(std::isnan(o3.attn.buf[i]));  // untouched
      EXPECT_TRUE(std::isnan(o3.jac.buf[i]));
    }
  }
}

// The compile-time phi/phi' of the fused kernels agree with the runtime definitions.
TEST(Activation, FixedFormsMatchRuntime) {
  const auto ex = [](double x) { return std::exp(x); };
  for (const auto& a : all_activations()) {
    if (a.activation == Activation::softmax) continue;
    const PhiParams p = resolve_phi(a, 37);
    for (double s = -3.0; s <= 3.0; s += 0.37) {
      // The kernels' compile-time forms, through the dispatch they instantiate through.
      double f = 0, g = 0;
      dispatch_activation(a, [&](auto tag, auto deg) {
        constexpr Activation A = decltype(tag)::value;
        constexpr int32_t Deg = decltype(deg)::value;
        f = phi_fixed<A, Deg>(p, s, ex), g = dphi_fixed<A, Deg>(p, s, ex);
        EXPECT_DOUBLE_EQ((phi_fixed<A, 0>(p, s, ex)), phi_elementwise(p, s)) << act_name(a);
      });
      EXPECT_DOUBLE_EQ(f, phi_elementwise(p, s)) << act_name(a) << " s=" << s;
      EXPECT_DOUBLE_EQ(g, dphi_elementwise(p, s)) << act_name(a) << " s=" << s;
      // ... and the registry's plain float64 reference, given the same (float) c and bias.
      const ActivationInfo& info = activation_info(a.activation);
      EXPECT_NEAR(f, info.ref_phi(s, p.c, a.degree, p.bias), 1e-12 * (1 + std::abs(f))) << act_name(a) << " s=" << s;
      EXPECT_NEAR(g, info.ref_dphi(s, p.c, a.degree, p.bias), 1e-12 * (1 + std::abs(g))) << act_name(a) << " s=" << s;
    }
  }
}

// ---- Theorem 4.1: ||softmax(S)||_F <= sqrt(N), ||d softmax/dS||_F <= sqrt(N)/2 ------------

// Runs softmax attention with S = Q exactly (K = I, score_scale = 1, d = Nk = N) and
// returns the kernel's {attn_fro, jac_fro} and the reference's.
std::array<double, 4> softmax_norms_of(const std::vector<float>& logits, int64_t N) {
  ShapeCase c{{1, 1, N, N, N, 1}, false, false};
  AttentionSpec spec;
  spec.score_scale = 1.0f;
  Inputs in;
  in.q = logits;
  in.k.assign(N * N, 0.0f);
  for (int64_t j = 0; j < N; ++j) in.k[j * N + j] = 1.0f;
  in.v.assign(N, 1.0f);
  in.dO.assign(N, 1.0f);
  KernelOut out(c.sh);
  run_kernel(spec, c, in, out);
  const Ref r = reference(spec, c.sh, to_double(in.q), to_double(in.k), to_double(in.v), {}, {});
  return {out.attn.buf[0], out.jac.buf[0], r.attn[0], r.jac[0]};
}

TEST(Theorem41, SoftmaxNormBounds) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t N : {1, 2, 7, 64, 129}) {
    const double rootN = std::sqrt(static_cast<double>(N));
    for (const char* kind : {"random", "huge", "onehot", "twohot"}) {
      if (std::string(kind) == "twohot" && N < 2) continue;
      SCOPED_TRACE(std::string("N=") + std::to_string(N) + " input=" + kind);
      std::vector<float> S(N * N);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t j = 0; j < N; ++j) {
          float& s = S[i * N + j];
          const std::string k = kind;
          if (k == "random")
            s = 3.0f * nd(rng);
          else if (k == "huge")
            s = 1e4f * nd(rng);
          else if (k == "onehot")
            s = j == (i * 7) % N ? 1e4f : -1e4f;
          else
            s = (j == i % N || j == (i + 1) % N) ? 1e4f : -1e4f;  // two equal maximal logits
        }
      const auto n = softmax_norms_of(S, N);
      for (int which : {0, 2}) {  // kernel, reference
        EXPECT_TRUE(std::isfinite(n[which]) && std::isfinite(n[which + 1]));
        EXPECT_LE(n[which], rootN * (1 + 1e-6));
        EXPECT_LE(n[which + 1], rootN / 2 * (1 + 1e-6));
        if (std::string(kind) == "onehot") {
          EXPECT_NEAR(n[which], rootN, 1e-6 * rootN);  // the sqrt(N) bound is attained
          EXPECT_NEAR(n[which + 1], 0.0, 1e-6 * rootN);
        }
        if (std::string(kind) == "twohot") {
          // Rows (1/2, 1/2, 0...): per row sum p^2 - 2 sum p^3 + (sum p^2)^2 = 1/4.
          EXPECT_NEAR(n[which + 1], rootN / 2, 1e-6 * rootN / 2);
          EXPECT_NEAR(n[which], rootN / std::sqrt(2.0), 1e-6 * rootN);
        }
      }
    }
  }
}

// ---- the packed path (the trainer's layout, kernels/attention.h) ------------------------

// qkv (B, T, 3C) -> q, k, v [B,H,T,16] for the reference; o / dO rows (B, T, C) <-> [B,H,T,16].
struct PackedCase {
  int64_t B, H, T;
};

std::vector<float> heads_of(const std::vector<float>& rows, int64_t B, int64_t T, int64_t H, int64_t ld, int64_t off) {
  const int64_t d = 16;
  std::vector<float> out(static_cast<size_t>(B * H * T * d));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t c = 0; c < d; ++c)
          out[static_cast<size_t>(((b * H + h) * T + t) * d + c)] =
              rows[static_cast<size_t>((b * T + t) * ld + off + h * d + c)];
  return out;
}

struct PackedOut {
  Guarded<float> O, lse, dqkv;
  Guarded<double> attn, jac;
  PackedOut(int64_t B, int64_t H, int64_t T)
      : O(B * T * H * 16), lse(B * H * T), dqkv(B * T * 3 * H * 16), attn(B * H), jac(B * H) {}
};

void run_packed(const AttentionSpec& spec, const AttentionShape& sh, const std::vector<float>& qkv,
                const std::vector<float>& dO, PackedOut& out) {
  attention_forward_packed_cpu(spec, sh, qkv.data(), out.O.data(), out.lse.data(), out.attn.data(), out.jac.data());
  attention_backward_packed_cpu(spec, sh, qkv.data(), out.O.data(), dO.data(), out.lse.data(), out.dqkv.data());
}

// Against the float64 reference for every activation, at lengths around the 16-key
// vectors, the 4-row and 8-row tiles and the 64-key column blocks (1 .. 256), and bit for
// bit the same at 1, 2 and 3 threads.
TEST(AttentionPacked, MatchesReferenceAndIsThreadCountIndependent) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "no AVX-512: the packed path is never taken on this CPU";
  const std::vector<PackedCase> cases = {{1, 1, 1},  {2, 1, 5},  {1, 2, 16},  {2, 4, 17}, {3, 4, 49},
                                         {1, 3, 64}, {1, 2, 65}, {1, 1, 130}, {1, 1, 256}};
  for (const auto& a : all_activations())
    for (const PackedCase& pc : cases) {
      const int64_t B = pc.B, H = pc.H, T = pc.T, C = H * 16;
      SCOPED_TRACE("case: " + act_name(a) + " B" + std::to_string(B) + " H" + std::to_string(H) + " T" +
                   std::to_string(T));
      AttentionSpec spec;
      spec.act = a;
      const AttentionShape sh{B, H, T, T, 16, 16};
      ASSERT_TRUE(attention_packed_cpu_usable(spec, sh));
      std::mt19937 rng(static_cast<uint32_t>(7 * T + H));
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> qkv(static_cast<size_t>(B * T * 3 * C)), dO(static_cast<size_t>(B * T * C));
      for (auto& e : qkv) e = nd(rng);
      for (auto& e : dO) e = nd(rng);
      const std::vector<float> q = heads_of(qkv, B, T, H, 3 * C, 0), k = heads_of(qkv, B, T, H, 3 * C, C),
                               v = heads_of(qkv, B, T, H, 3 * C, 2 * C), dOh = heads_of(dO, B, T, H, C, 0);
      const Ref ref = reference(spec, sh, to_double(q), to_double(k), to_double(v), {}, to_double(dOh));
      PackedOut out(B, H, T);
      run_packed(spec, sh, qkv, dO, out);
      const double tol = tolerance(sh);
      const std::vector<float> O(out.O.buf.begin(), out.O.buf.begin() + out.O.n),
          dqkv(out.dqkv.buf.begin(), out.dqkv.buf.begin() + out.dqkv.n);
      EXPECT_TRUE(close("O", heads_of(O, B, T, H, C, 0).data(), ref.O, tol));
      EXPECT_TRUE(close("attn_fro", out.attn.data(), ref.attn, tol));
      EXPECT_TRUE(close("jac_fro", out.jac.data(), ref.jac, tol));
      EXPECT_TRUE(close("dQ", heads_of(dqkv, B, T, H, 3 * C, 0).data(), ref.dQ, tol));
      EXPECT_TRUE(close("dK", heads_of(dqkv, B, T, H, 3 * C, C).data(), ref.dK, tol));
      EXPECT_TRUE(close("dV", heads_of(dqkv, B, T, H, 3 * C, 2 * C).data(), ref.dV, tol));
      for (auto [name, ok] : {std::pair{"O", out.O.guard_ok()},
                              {"lse", out.lse.guard_ok()},
                              {"dqkv", out.dqkv.guard_ok()},
                              {"attn_fro", out.attn.guard_ok()},
                              {"jac_fro", out.jac.guard_ok()}})
        EXPECT_TRUE(ok) << "write past the end of " << name;
      if (a.activation == Activation::softmax) {  // lse as the split-heads kernel computes it
        KernelOut split(sh);
        attention_forward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, split.O.data(), split.lse.data(),
                              split.attn.data(), split.jac.data());
        EXPECT_TRUE(close("lse", out.lse.data(),
                          to_double(std::vector<float>(split.lse.buf.begin(), split.lse.buf.begin() + split.lse.n)),
                          tol));
      }
      {  // Without norms (the training steps that log none; softmax takes another pass).
        AttentionSpec off = spec;
        off.collect_norms = false;
        PackedOut o2(B, H, T);
        attention_forward_packed_cpu(off, sh, qkv.data(), o2.O.data(), o2.lse.data(), nullptr, nullptr);
        attention_backward_packed_cpu(off, sh, qkv.data(), o2.O.data(), dO.data(), o2.lse.data(), o2.dqkv.data());
        const std::vector<float> O2(o2.O.buf.begin(), o2.O.buf.begin() + o2.O.n),
            dqkv2(o2.dqkv.buf.begin(), o2.dqkv.buf.begin() + o2.dqkv.n);
        EXPECT_TRUE(close("O (no norms)", heads_of(O2, B, T, H, C, 0).data(), ref.O, tol));
        EXPECT_TRUE(close("dQ (no norms)", heads_of(dqkv2, B, T, H, 3 * C, 0).data(), ref.dQ, tol));
        EXPECT_TRUE(close("dK (no norms)", heads_of(dqkv2, B, T, H, 3 * C, C).data(), ref.dK, tol));
        EXPECT_TRUE(close("dV (no norms)", heads_of(dqkv2, B, T, H, 3 * C, 2 * C).data(), ref.dV, tol));
        if (a.activation == Activation::softmax) {
          EXPECT_TRUE(close("lse (no norms)", o2.lse.data(),
                            to_double(std::vector<float>(out.lse.buf.begin(), out.lse.buf.begin() + out.lse.n)), tol));
        }
        EXPECT_TRUE(o2.O.guard_ok() && o2.lse.guard_ok() && o2.dqkv.guard_ok()) << "write past the end (no norms)";
      }
      const int saved = omp_get_max_threads();
      for (int threads : {1, 3}) {
        omp_set_num_threads(threads);
        PackedOut again(B, H, T);
        run_packed(spec, sh, qkv, dO, again);
        // Bitwise (lse is left NaN, unwritten, for element-wise phi).
        auto same = [](const auto& x, const auto& y) {
          return x.buf.size() == y.buf.size() &&
                 std::memcmp(x.buf.data(), y.buf.data(), x.buf.size() * sizeof(x.buf[0])) == 0;
        };
        EXPECT_TRUE(same(again.O, out.O) && same(again.lse, out.lse) && same(again.dqkv, out.dqkv) &&
                    same(again.attn, out.attn) && same(again.jac, out.jac))
            << "not bit-identical at " << threads << " threads";
      }
      omp_set_num_threads(saved);
    }
}

// Where the packed path is not taken.
TEST(AttentionPacked, Usable) {
  AttentionSpec spec;
  const bool avx512 = cpu::gemm_avx512_supported();
  EXPECT_EQ(attention_packed_cpu_usable(spec, {2, 4, 49, 49, 16, 16}), avx512);
  EXPECT_FALSE(attention_packed_cpu_usable(spec, {2, 4, 49, 49, 32, 32}));    // head width
  EXPECT_FALSE(attention_packed_cpu_usable(spec, {2, 4, 1, 49, 16, 16}));     // not self-attention
  EXPECT_FALSE(attention_packed_cpu_usable(spec, {2, 4, 257, 257, 16, 16}));  // too long
  spec.causal = true;
  EXPECT_FALSE(attention_packed_cpu_usable(spec, {2, 4, 49, 49, 16, 16}));
  spec.causal = false;
  const cpu::GemmPath saved = cpu::gemm_path();
  cpu::set_gemm_path(cpu::GemmPath::OpenBlas);
  EXPECT_FALSE(attention_packed_cpu_usable(spec, {2, 4, 49, 49, 16, 16}));
  cpu::set_gemm_path(saved);
}

}  // namespace
}  // namespace attnsweep
