// matmul_forward / matmul_backward (kernels/ops.h) on both CPU paths, the AVX-512 kernels
// of kernels/cpu/gemm.cpp and the OpenBLAS fallback, over shapes that hit every tail of
// the 8 x 32 tiling and the dweight row chunks:
// - against a float64 reference with the rigorous bound of a float32 sum of n terms,
//   |err| <= (n + 2) u sum|terms| (u = 2^-24), whatever the summation order;
// - the AVX-512 path bit for bit against its scalar model (one fmaf chain per element in
//   k order, started at the bias / at 0 and then added), with 1 and 2 threads;
// - guard elements after every output: no write out of bounds;
// - the fused layer forward and backward (layer_*_fused_cpu) against the ops they replace.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/ops.h"

namespace attnsweep {
namespace {

using FVec = std::vector<float>;
constexpr double kU = 1.0 / (1 << 24);  // float32 unit roundoff
constexpr int64_t kGuard = 37;          // guard elements after each output buffer
constexpr float kGuardValue = -12345.5f;

FVec randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  FVec x(n);
  for (auto& e : x) e = nd(rng);
  return x;
}

// An output buffer of n elements (random initial values, the backward adds to them) and
// its guard tail.
FVec out_buf(size_t n, uint32_t seed) {
  FVec x = randn(n, seed);
  x.resize(n + kGuard, kGuardValue);
  return x;
}
::testing::AssertionResult guard_ok(const std::string& what, const FVec& x) {
  for (size_t i = x.size() - kGuard; i < x.size(); ++i)
    if (x[i] != kGuardValue) return ::testing::AssertionFailure() << what << ": write past the end at " << i;
  return ::testing::AssertionSuccess();
}

struct Shape {
  int64_t N, C, OC;  // rows, inner size, output width (ops.h names)
};
std::string name(const Shape& s) {
  std::ostringstream o;
  o << "N=" << s.N << " C=" << s.C << " OC=" << s.OC;
  return o.str();
}

// Tails of 8 rows / 32 and 16 columns, K = 1, single rows / columns, the reference cell's
// shapes, and enough rows for several dweight chunks (chunk = max(64, 65536 / (C + OC))).
const std::vector<Shape> kShapes = {
    {1, 1, 1},    {1, 64, 64},  {2, 3, 5},      {7, 1, 33},      {9, 17, 1},     {8, 32, 32},
    {13, 16, 17}, {31, 33, 47}, {64, 64, 64},   {65, 64, 192},   {130, 256, 64}, {129, 48, 64},
    {100, 1, 16}, {3, 300, 70}, {2100, 24, 40}, {700, 200, 150}, {1, 256, 256},  {257, 31, 7},
};

// The float64 reference and, per element, sum |terms| for the error bound.
struct Ref {
  std::vector<double> val, mag;
};

Ref ref_forward(const FVec& x, const FVec& w, const float* b, const Shape& s) {
  Ref r{std::vector<double>(static_cast<size_t>(s.N * s.OC)), std::vector<double>(static_cast<size_t>(s.N * s.OC))};
  for (int64_t i = 0; i < s.N; ++i)
    for (int64_t o = 0; o < s.OC; ++o) {
      double v = b != nullptr ? b[o] : 0.0, m = std::abs(v);
      for (int64_t c = 0; c < s.C; ++c) {
        const double t = static_cast<double>(x[i * s.C + c]) * w[o * s.C + c];
        v += t, m += std::abs(t);
      }
      r.val[i * s.OC + o] = v, r.mag[i * s.OC + o] = m;
    }
  return r;
}

::testing::AssertionResult within(const std::string& what, const FVec& got, const Ref& ref, int64_t nterms) {
  for (size_t i = 0; i < ref.val.size(); ++i) {
    const double g = got[i];
    const double bound = static_cast<double>(nterms + 2) * kU * ref.mag[i] + 1e-30;
    if (!std::isfinite(g) || std::abs(g - ref.val[i]) > bound)
      return ::testing::AssertionFailure()
             << what << "[" << i << "] = " << g << ", reference " << ref.val[i] << ", bound " << bound;
  }
  return ::testing::AssertionSuccess();
}

struct Grads {
  FVec dx, dw, db;
};

// Backward on the current path; dinp / dbias present or not.
Grads run_backward(const FVec& x, const FVec& w, const FVec& dout, const Shape& s, bool with_dx, bool with_db) {
  Grads g{out_buf(static_cast<size_t>(s.N * s.C), 11), out_buf(static_cast<size_t>(s.OC * s.C), 12),
          out_buf(static_cast<size_t>(s.OC), 13)};
  matmul_backward(with_dx ? g.dx.data() : nullptr, g.dw.data(), with_db ? g.db.data() : nullptr, dout.data(), x.data(),
                  w.data(), s.N, s.C, s.OC);
  return g;
}

class GemmPathGuard {  // restores the default path after a test
 public:
  explicit GemmPathGuard(cpu::GemmPath p) : saved_(cpu::gemm_path()) { cpu::set_gemm_path(p); }
  ~GemmPathGuard() { cpu::set_gemm_path(saved_); }
  GemmPathGuard(const GemmPathGuard&) = delete;
  GemmPathGuard& operator=(const GemmPathGuard&) = delete;

 private:
  cpu::GemmPath saved_;
};

void check_against_float64(cpu::GemmPath path) {
  GemmPathGuard guard(path);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const FVec x = randn(static_cast<size_t>(s.N * s.C), 1), w = randn(static_cast<size_t>(s.OC * s.C), 2),
               b = randn(static_cast<size_t>(s.OC), 3), dout = randn(static_cast<size_t>(s.N * s.OC), 4);
    for (bool with_bias : {true, false}) {
      FVec out = out_buf(static_cast<size_t>(s.N * s.OC), 5);
      matmul_forward(out.data(), x.data(), w.data(), with_bias ? b.data() : nullptr, s.N, s.C, s.OC);
      EXPECT_TRUE(within("out", out, ref_forward(x, w, with_bias ? b.data() : nullptr, s), s.C + 1));
      EXPECT_TRUE(guard_ok("out", out));
    }
    for (bool with_dx : {true, false})
      for (bool with_db : {true, false}) {
        SCOPED_TRACE(std::string(with_dx ? "dinp" : "no dinp") + (with_db ? " dbias" : " no dbias"));
        const Grads g = run_backward(x, w, dout, s, with_dx, with_db);
        // the initial values run_backward gave them
        const Grads init{out_buf(static_cast<size_t>(s.N * s.C), 11), out_buf(static_cast<size_t>(s.OC * s.C), 12),
                         out_buf(static_cast<size_t>(s.OC), 13)};
        const FVec& dx0 = init.dx;
        // dinp = dx0 + dout @ w   (a forward with weight^T and dx0 as a per-element bias)
        if (with_dx) {
          Ref r{std::vector<double>(dx0.begin(), dx0.end() - kGuard), std::vector<double>(dx0.size() - kGuard)};
          for (int64_t i = 0; i < s.N; ++i)
            for (int64_t c = 0; c < s.C; ++c) {
              double v = 0, m = 0;
              for (int64_t o = 0; o < s.OC; ++o) {
                const double t = static_cast<double>(dout[i * s.OC + o]) * w[o * s.C + c];
                v += t, m += std::abs(t);
              }
              r.val[i * s.C + c] += v, r.mag[i * s.C + c] = m + std::abs(r.val[i * s.C + c]);
            }
          EXPECT_TRUE(within("dinp", g.dx, r, s.OC + 1));
        } else {
          EXPECT_EQ(0, std::memcmp(g.dx.data(), dx0.data(), dx0.size() * sizeof(float))) << "dinp touched";
        }
        EXPECT_TRUE(guard_ok("dinp", g.dx));
        // dweight = dw0 + dout^T @ x
        Ref r{std::vector<double>(init.dw.begin(), init.dw.end() - kGuard),
              std::vector<double>(init.dw.size() - kGuard)};
        for (int64_t o = 0; o < s.OC; ++o)
          for (int64_t c = 0; c < s.C; ++c) {
            double v = 0, m = 0;
            for (int64_t i = 0; i < s.N; ++i) {
              const double t = static_cast<double>(dout[i * s.OC + o]) * x[i * s.C + c];
              v += t, m += std::abs(t);
            }
            r.val[o * s.C + c] += v, r.mag[o * s.C + c] = m + std::abs(r.val[o * s.C + c]);
          }
        EXPECT_TRUE(within("dweight", g.dw, r, s.N + 1));
        EXPECT_TRUE(guard_ok("dweight", g.dw));
        // dbias = db0 + colsum(dout), summed in float64: two float32 roundings at most
        if (with_db) {
          Ref rb{std::vector<double>(init.db.begin(), init.db.end() - kGuard), std::vector<double>(s.OC)};
          for (int64_t o = 0; o < s.OC; ++o) {
            double v = 0, m = 0;
            for (int64_t i = 0; i < s.N; ++i) v += dout[i * s.OC + o], m += std::abs(dout[i * s.OC + o]);
            rb.val[o] += v, rb.mag[o] = m + std::abs(rb.val[o]);
          }
          EXPECT_TRUE(within("dbias", g.db, rb, 1));
        } else {
          EXPECT_EQ(0, std::memcmp(g.db.data(), init.db.data(), g.db.size() * sizeof(float))) << "dbias touched";
        }
        EXPECT_TRUE(guard_ok("dbias", g.db));
      }
  }
}

TEST(Gemm, Avx512PathMatchesFloat64) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "CPU without avx512f: the fallback is tested below";
  check_against_float64(cpu::GemmPath::Auto);
}

TEST(Gemm, OpenBlasPathMatchesFloat64) {
  check_against_float64(cpu::GemmPath::OpenBlas);
}

TEST(Gemm, PathSelection) {
  {
    GemmPathGuard g(cpu::GemmPath::OpenBlas);
    EXPECT_FALSE(cpu::gemm_avx512_usable(64, 64));
  }
  GemmPathGuard g(cpu::GemmPath::Auto);
  EXPECT_EQ(cpu::gemm_avx512_supported(), cpu::gemm_avx512_usable(64, 192));
  EXPECT_EQ(cpu::gemm_avx512_supported(), cpu::gemm_avx512_usable(1, 1));
  EXPECT_FALSE(cpu::gemm_avx512_usable(100000, 64));  // beyond the kernels' range: OpenBLAS
}

// The AVX-512 path is exactly its scalar model: per element one float32 FMA chain in k
// order (forward from the bias; dinp and dweight from 0, the chain then added to the old
// value), dbias a float64 row-order sum added once; with 1 and with 2 threads.
TEST(Gemm, Avx512PathIsItsScalarModelAtAnyThreadCount) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "CPU without avx512f";
  GemmPathGuard guard(cpu::GemmPath::Auto);
  const int saved_threads = omp_get_max_threads();
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const FVec x = randn(static_cast<size_t>(s.N * s.C), 21), w = randn(static_cast<size_t>(s.OC * s.C), 22),
               b = randn(static_cast<size_t>(s.OC), 23), dout = randn(static_cast<size_t>(s.N * s.OC), 24);
    FVec out_m(static_cast<size_t>(s.N * s.OC));
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t o = 0; o < s.OC; ++o) {
        float acc = b[o];
        for (int64_t c = 0; c < s.C; ++c) acc = std::fma(x[i * s.C + c], w[o * s.C + c], acc);
        out_m[i * s.OC + o] = acc;
      }
    Grads m{out_buf(static_cast<size_t>(s.N * s.C), 11), out_buf(static_cast<size_t>(s.OC * s.C), 12),
            out_buf(static_cast<size_t>(s.OC), 13)};
    for (int64_t i = 0; i < s.N; ++i)
      for (int64_t c = 0; c < s.C; ++c) {
        float acc = 0.0f;
        for (int64_t o = 0; o < s.OC; ++o) acc = std::fma(dout[i * s.OC + o], w[o * s.C + c], acc);
        m.dx[i * s.C + c] += acc;
      }
    for (int64_t o = 0; o < s.OC; ++o) {
      for (int64_t c = 0; c < s.C; ++c) {
        float acc = 0.0f;
        for (int64_t i = 0; i < s.N; ++i) acc = std::fma(dout[i * s.OC + o], x[i * s.C + c], acc);
        m.dw[o * s.C + c] += acc;
      }
      double acc = 0.0;
      for (int64_t i = 0; i < s.N; ++i) acc += dout[i * s.OC + o];
      m.db[o] += static_cast<float>(acc);
    }
    for (int threads : {1, 2}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      omp_set_num_threads(threads);
      FVec out(static_cast<size_t>(s.N * s.OC));
      matmul_forward(out.data(), x.data(), w.data(), b.data(), s.N, s.C, s.OC);
      const Grads g = run_backward(x, w, dout, s, true, true);
      EXPECT_EQ(0, std::memcmp(out.data(), out_m.data(), out.size() * sizeof(float))) << "out";
      EXPECT_EQ(0, std::memcmp(g.dx.data(), m.dx.data(), g.dx.size() * sizeof(float))) << "dinp";
      EXPECT_EQ(0, std::memcmp(g.dw.data(), m.dw.data(), g.dw.size() * sizeof(float))) << "dweight";
      EXPECT_EQ(0, std::memcmp(g.db.data(), m.db.data(), g.db.size() * sizeof(float))) << "dbias";
    }
  }
  omp_set_num_threads(saved_threads);
}

// The GELU fused into the MLP's matmuls gives exactly the unfused ops' values (zeros'
// signs aside: compared with ==), on both paths; dpre is overwritten whatever it held.
void check_fused_gelu(cpu::GemmPath path) {
  GemmPathGuard guard(path);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const FVec x = randn(static_cast<size_t>(s.N * s.C), 31), w = randn(static_cast<size_t>(s.OC * s.C), 32),
               b = randn(static_cast<size_t>(s.OC), 33);
    const size_t no = static_cast<size_t>(s.N * s.OC), ni = static_cast<size_t>(s.N * s.C);
    FVec pre_u(no), out_u(no), pre_f = out_buf(no, 34), out_f = out_buf(no, 35);
    matmul_forward(pre_u.data(), x.data(), w.data(), b.data(), s.N, s.C, s.OC);
    gelu_forward(out_u.data(), pre_u.data(), s.N * s.OC);
    matmul_gelu_forward(pre_f.data(), out_f.data(), x.data(), w.data(), b.data(), s.N, s.C, s.OC);
    for (size_t i = 0; i < no; ++i) {
      ASSERT_EQ(pre_u[i], pre_f[i]) << "pre at " << i;
      ASSERT_EQ(out_u[i], out_f[i]) << "out at " << i;
    }
    EXPECT_TRUE(guard_ok("pre", pre_f));
    EXPECT_TRUE(guard_ok("out", out_f));
    // backward of a matmul (N, C) -> (N, OC) whose input is gelu(pre), pre (N, C)
    const FVec pre = randn(ni, 36), dout = randn(no, 37);
    FVec act(ni);
    gelu_forward(act.data(), pre.data(), s.N * s.C);
    FVec dact(ni, 0.0f), dpre_u(ni, 0.0f), dw_u = randn(static_cast<size_t>(s.OC * s.C), 38),
                                           db_u = randn(static_cast<size_t>(s.OC), 39);
    FVec dw_f = dw_u, db_f = db_u, dpre_f = out_buf(ni, 40);
    matmul_backward(dact.data(), dw_u.data(), db_u.data(), dout.data(), act.data(), w.data(), s.N, s.C, s.OC);
    gelu_backward(dpre_u.data(), pre.data(), dact.data(), s.N * s.C);
    gelu_matmul_backward(dpre_f.data(), dw_f.data(), db_f.data(), dout.data(), act.data(), pre.data(), w.data(), s.N,
                         s.C, s.OC);
    for (size_t i = 0; i < ni; ++i) ASSERT_EQ(dpre_u[i], dpre_f[i]) << "dpre at " << i;
    EXPECT_TRUE(guard_ok("dpre", dpre_f));
    EXPECT_EQ(0, std::memcmp(dw_u.data(), dw_f.data(), dw_u.size() * sizeof(float))) << "dweight";
    EXPECT_EQ(0, std::memcmp(db_u.data(), db_f.data(), db_u.size() * sizeof(float))) << "dbias";
  }
}

TEST(Gemm, FusedGeluIsTheUnfusedOpsAvx512) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "CPU without avx512f: the fallback is tested below";
  check_fused_gelu(cpu::GemmPath::Auto);
}

TEST(Gemm, FusedGeluIsTheUnfusedOpsOpenBlas) {
  check_fused_gelu(cpu::GemmPath::OpenBlas);
}

// matmul_backward_overwrite gives exactly zero-fill + matmul_backward (compared with ==,
// zeros' signs aside), whatever dinp held before, on both paths.
void check_backward_overwrite(cpu::GemmPath path) {
  GemmPathGuard guard(path);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t no = static_cast<size_t>(s.N * s.OC), ni = static_cast<size_t>(s.N * s.C);
    const FVec x = randn(ni, 51), w = randn(static_cast<size_t>(s.OC * s.C), 52), dout = randn(no, 53);
    FVec dx_u(ni, 0.0f), dw_u = randn(static_cast<size_t>(s.OC * s.C), 54), db_u = randn(static_cast<size_t>(s.OC), 55);
    FVec dx_o = out_buf(ni, 56), dw_o = dw_u, db_o = db_u;
    matmul_backward(dx_u.data(), dw_u.data(), db_u.data(), dout.data(), x.data(), w.data(), s.N, s.C, s.OC);
    matmul_backward_overwrite(dx_o.data(), dw_o.data(), db_o.data(), dout.data(), x.data(), w.data(), s.N, s.C, s.OC);
    for (size_t i = 0; i < ni; ++i) ASSERT_EQ(dx_u[i], dx_o[i]) << "dinp at " << i;
    EXPECT_TRUE(guard_ok("dinp", dx_o));
    EXPECT_EQ(0, std::memcmp(dw_u.data(), dw_o.data(), dw_u.size() * sizeof(float))) << "dweight";
    EXPECT_EQ(0, std::memcmp(db_u.data(), db_o.data(), db_u.size() * sizeof(float))) << "dbias";
  }
}

TEST(Gemm, BackwardOverwriteIsZeroThenBackwardAvx512) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "CPU without avx512f: the fallback is tested below";
  check_backward_overwrite(cpu::GemmPath::Auto);
}

// matmul_residual_forward gives exactly matmul_forward then residual_forward, on both paths.
void check_residual_forward(cpu::GemmPath path) {
  GemmPathGuard guard(path);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t no = static_cast<size_t>(s.N * s.OC);
    const FVec x = randn(static_cast<size_t>(s.N * s.C), 61), w = randn(static_cast<size_t>(s.OC * s.C), 62),
               b = randn(static_cast<size_t>(s.OC), 63), r = randn(no, 64);
    FVec out_u(no), out_f = out_buf(no, 65);
    matmul_forward(out_u.data(), x.data(), w.data(), b.data(), s.N, s.C, s.OC);
    residual_forward(out_u.data(), out_u.data(), r.data(), static_cast<int64_t>(no));
    matmul_residual_forward(out_f.data(), x.data(), w.data(), b.data(), r.data(), s.N, s.C, s.OC);
    for (size_t i = 0; i < no; ++i) ASSERT_EQ(out_u[i], out_f[i]) << "out at " << i;
    EXPECT_TRUE(guard_ok("out", out_f));
  }
}

TEST(Gemm, ResidualForwardIsTheUnfusedOpsAvx512) {
  if (!cpu::gemm_avx512_supported()) GTEST_SKIP() << "CPU without avx512f: the fallback is tested below";
  check_residual_forward(cpu::GemmPath::Auto);
}

TEST(Gemm, ResidualForwardIsTheUnfusedOpsOpenBlas) {
  check_residual_forward(cpu::GemmPath::OpenBlas);
}

TEST(Gemm, BackwardOverwriteIsZeroThenBackwardOpenBlas) {
  check_backward_overwrite(cpu::GemmPath::OpenBlas);
}

// ---- the fused transformer layer (kernels/ops.h layer_forward_fused_cpu / backward) ----
// One layer of B = 11 samples of T = 49 tokens (blocks of 5 samples: the last is short),
// C = 64, 4 heads, F = 256: random parameters near their initial scales, the forward by
// the op sequence the fused path replaces (worker/model/model.cpp's unfused CPU path).
struct LayerCase {
  static constexpr int64_t B = 11, T = 49, H = 4, C = 64, F = 256, BT = B * T;
  AttentionShape sh{B, H, T, T, 16, 16};
  AttentionSpec spec;
  FVec inp, ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
  struct Acts {
    FVec ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res1, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, res2;
    std::vector<double> attn, jac;
    Acts()
        : ln1(BT * C),
          ln1_mean(BT),
          ln1_rstd(BT),
          qkv(BT * 3 * C),
          atty(BT * C),
          lse(B * H * T),
          res1(BT * C),
          ln2(BT * C),
          ln2_mean(BT),
          ln2_rstd(BT),
          fch(BT * F),
          fch_gelu(BT * F),
          res2(BT * C),
          attn(B * H, -1.0),
          jac(B * H, -1.0) {}
  } ref;

  static FVec param(int64_t n, uint32_t seed, float scale, float shift) {
    FVec v = randn(static_cast<size_t>(n), seed);
    for (auto& e : v) e = e * scale + shift;
    return v;
  }
  LayerCase(const ActivationSpec& act, bool norms)
      : inp(randn(static_cast<size_t>(BT * C), 71)),
        ln1_w(param(C, 72, 0.1f, 1.0f)),
        ln1_b(param(C, 73, 0.1f, 0.0f)),
        qkv_w(param(3 * C * C, 74, 0.125f, 0.0f)),
        qkv_b(param(3 * C, 75, 0.1f, 0.0f)),
        proj_w(param(C * C, 76, 0.125f, 0.0f)),
        proj_b(param(C, 77, 0.1f, 0.0f)),
        ln2_w(param(C, 78, 0.1f, 1.0f)),
        ln2_b(param(C, 79, 0.1f, 0.0f)),
        fc_w(param(F * C, 80, 0.125f, 0.0f)),
        fc_b(param(F, 81, 0.1f, 0.0f)),
        fcproj_w(param(C * F, 82, 0.0625f, 0.0f)),
        fcproj_b(param(C, 83, 0.1f, 0.0f)) {
    spec.act = act;
    spec.collect_norms = norms;
    // The reference takes the packed attention (AVX-512): without it the tests skip, and
    // nothing is computed here (an AVX2 machine would stop on an illegal instruction).
    if (!layer_forward_fused_cpu_usable(spec, sh, F)) return;
    Acts& r = ref;
    layernorm_forward(r.ln1.data(), r.ln1_mean.data(), r.ln1_rstd.data(), inp.data(), ln1_w.data(), ln1_b.data(), BT,
                      C);
    matmul_forward(r.qkv.data(), r.ln1.data(), qkv_w.data(), qkv_b.data(), BT, C, 3 * C);
    attention_forward_packed_cpu(spec, sh, r.qkv.data(), r.atty.data(), r.lse.data(), r.attn.data(), r.jac.data());
    matmul_residual_forward(r.res1.data(), r.atty.data(), proj_w.data(), proj_b.data(), inp.data(), BT, C, C);
    layernorm_forward(r.ln2.data(), r.ln2_mean.data(), r.ln2_rstd.data(), r.res1.data(), ln2_w.data(), ln2_b.data(), BT,
                      C);
    matmul_gelu_forward(r.fch.data(), r.fch_gelu.data(), r.ln2.data(), fc_w.data(), fc_b.data(), BT, C, F);
    matmul_residual_forward(r.res2.data(), r.fch_gelu.data(), fcproj_w.data(), fcproj_b.data(), r.res1.data(), BT, F,
                            C);
  }
  std::string name() const {
    return std::string(spec.act.activation == Activation::softmax ? "softmax" : "poly3") +
           (spec.collect_norms ? " norms" : "");
  }
};

const ActivationSpec kLayerActs[] = {{Activation::softmax, 1, ScaleKind::none, 1.0},
                                     {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0}};

template <class V>
void expect_same(const char* what, const V& x, const V& y) {
  ASSERT_EQ(x.size(), y.size()) << what;
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])), 0) << what << " differs";
}

// The fused forward against the op sequence, bit for bit: every output buffer, the saved
// statistics and the per-head norms, with the norms on and off, at 1, 2 and 3 threads.
TEST(Gemm, FusedLayerForwardIsTheOpSequence) {
  for (const ActivationSpec& act : kLayerActs)
    for (const bool norms : {true, false}) {
      const LayerCase lc(act, norms);
      if (!layer_forward_fused_cpu_usable(lc.spec, lc.sh, lc.F)) GTEST_SKIP() << "CPU without avx512f: no fused layer";
      const LayerCase::Acts& ref = lc.ref;
      const int saved = omp_get_max_threads();
      for (const int threads : {1, 2, 3}) {
        SCOPED_TRACE(lc.name() + ", threads " + std::to_string(threads));
        omp_set_num_threads(threads);
        LayerCase::Acts got;
        LayerForwardArgs a{};
        a.inp = lc.inp.data();
        a.ln1_w = lc.ln1_w.data(), a.ln1_b = lc.ln1_b.data(), a.qkv_w = lc.qkv_w.data(), a.qkv_b = lc.qkv_b.data();
        a.proj_w = lc.proj_w.data(), a.proj_b = lc.proj_b.data(), a.ln2_w = lc.ln2_w.data(), a.ln2_b = lc.ln2_b.data();
        a.fc_w = lc.fc_w.data(), a.fc_b = lc.fc_b.data(), a.fcproj_w = lc.fcproj_w.data(),
        a.fcproj_b = lc.fcproj_b.data();
        a.ln1 = got.ln1.data(), a.ln1_mean = got.ln1_mean.data(), a.ln1_rstd = got.ln1_rstd.data();
        a.qkv = got.qkv.data(), a.atty = got.atty.data(), a.lse = got.lse.data(), a.res1 = got.res1.data();
        a.ln2 = got.ln2.data(), a.ln2_mean = got.ln2_mean.data(), a.ln2_rstd = got.ln2_rstd.data();
        // The GELU's output kept with the norms on; off: not kept (only in the block scratch).
        a.fch = got.fch.data(), a.fch_gelu = norms ? got.fch_gelu.data() : nullptr, a.res2 = got.res2.data();
        a.attn_fro = got.attn.data(), a.jac_fro = got.jac.data();
        layer_forward_fused_cpu(lc.spec, lc.sh, lc.F, a);
        expect_same("ln1", ref.ln1, got.ln1);
        expect_same("ln1_mean", ref.ln1_mean, got.ln1_mean);
        expect_same("ln1_rstd", ref.ln1_rstd, got.ln1_rstd);
        expect_same("qkv", ref.qkv, got.qkv);
        expect_same("atty", ref.atty, got.atty);
        if (act.activation == Activation::softmax) expect_same("lse", ref.lse, got.lse);
        expect_same("res1", ref.res1, got.res1);
        expect_same("ln2", ref.ln2, got.ln2);
        expect_same("ln2_mean", ref.ln2_mean, got.ln2_mean);
        expect_same("ln2_rstd", ref.ln2_rstd, got.ln2_rstd);
        expect_same("fch", ref.fch, got.fch);
        if (norms) expect_same("fch_gelu", ref.fch_gelu, got.fch_gelu);
        expect_same("res2", ref.res2, got.res2);
        if (norms) {
          expect_same("attn_fro", ref.attn, got.attn);
          expect_same("jac_fro", ref.jac, got.jac);
          EXPECT_GT(got.attn[0], 0.0);
        }
      }
      omp_set_num_threads(saved);
    }
}

// sum_i |a[i][o]| |b[i][c]| (OC, C) in float64: the scale of dweight's rounding error.
std::vector<double> abs_products(const FVec& a, const FVec& b, int64_t n, int64_t OC, int64_t C) {
  std::vector<double> s(static_cast<size_t>(OC * C), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      const double ao = std::fabs(static_cast<double>(a[static_cast<size_t>(i * OC + o)]));
      for (int64_t c = 0; c < C; ++c)
        s[static_cast<size_t>(o * C + c)] += ao * std::fabs(static_cast<double>(b[static_cast<size_t>(i * C + c)]));
    }
  return s;
}

// The fused backward against the op sequence: the activation gradient dres out bit for
// bit (the per-block intermediates dbig, dln, dqkv are the fused path's own scratch; dres
// and the parameter gradients depend on all of them), since every op on it is row-local; the parameter gradients, which
// the fused path sums per block of samples and then across blocks in float64 where the ops run one float32 chain over
// all n = B T rows, within twice the rigorous bound of a float32 sum of n terms, 2 (n + 2) u sum|terms| (terms: the
// products of the two operands; LayerNorm: dout xhat and dout); and the fused results bit for bit the same at 1, 2 and
// 3 threads.
TEST(Gemm, FusedLayerBackwardIsTheOpSequence) {
  for (const ActivationSpec& act : kLayerActs) {
    const LayerCase lc(act, false);
    if (!layer_forward_fused_cpu_usable(lc.spec, lc.sh, lc.F)) GTEST_SKIP() << "CPU without avx512f: no fused layer";
    const int64_t BT = lc.BT, C = lc.C, F = lc.F;
    const LayerCase::Acts& r = lc.ref;
    const FVec dres_in = randn(static_cast<size_t>(BT * C), 90);
    struct Grads {
      FVec ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
      Grads()  // random: the gradients are added to
          : ln1_w(randn(C, 91)),
            ln1_b(randn(C, 92)),
            qkv_w(randn(3 * C * C, 93)),
            qkv_b(randn(3 * C, 94)),
            proj_w(randn(C * C, 95)),
            proj_b(randn(C, 96)),
            ln2_w(randn(C, 97)),
            ln2_b(randn(C, 98)),
            fc_w(randn(F * C, 99)),
            fc_b(randn(F, 100)),
            fcproj_w(randn(C * F, 101)),
            fcproj_b(randn(C, 102)) {}
    };
    struct Scratch {
      FVec dres, dln, dbig, dqkv;
      explicit Scratch(const FVec& d) : dres(d), dln(BT * C), dbig(BT * F), dqkv(BT * 3 * C) {}
    };
    // The op sequence (worker/model/model.cpp's unfused CPU path), keeping the operands of
    // every parameter gradient for the bounds.
    Grads ref_g;
    Scratch ref_s(dres_in);
    gelu_matmul_backward(ref_s.dbig.data(), ref_g.fcproj_w.data(), ref_g.fcproj_b.data(), ref_s.dres.data(),
                         r.fch_gelu.data(), r.fch.data(), lc.fcproj_w.data(), BT, F, C);
    matmul_backward_overwrite(ref_s.dln.data(), ref_g.fc_w.data(), ref_g.fc_b.data(), ref_s.dbig.data(), r.ln2.data(),
                              lc.fc_w.data(), BT, C, F);
    const FVec dbig = ref_s.dbig, dln2 = ref_s.dln;
    layernorm_backward(ref_s.dres.data(), ref_g.ln2_w.data(), ref_g.ln2_b.data(), ref_s.dln.data(), r.res1.data(),
                       lc.ln2_w.data(), r.ln2_mean.data(), r.ln2_rstd.data(), BT, C);
    const FVec dres_mid = ref_s.dres;
    matmul_backward_overwrite(ref_s.dln.data(), ref_g.proj_w.data(), ref_g.proj_b.data(), ref_s.dres.data(),
                              r.atty.data(), lc.proj_w.data(), BT, C, C);
    attention_backward_packed_cpu(lc.spec, lc.sh, r.qkv.data(), r.atty.data(), ref_s.dln.data(), r.lse.data(),
                                  ref_s.dqkv.data());
    matmul_backward_overwrite(ref_s.dln.data(), ref_g.qkv_w.data(), ref_g.qkv_b.data(), ref_s.dqkv.data(), r.ln1.data(),
                              lc.qkv_w.data(), BT, C, 3 * C);
    const FVec dln1 = ref_s.dln;
    layernorm_backward(ref_s.dres.data(), ref_g.ln1_w.data(), ref_g.ln1_b.data(), ref_s.dln.data(), lc.inp.data(),
                       lc.ln1_w.data(), r.ln1_mean.data(), r.ln1_rstd.data(), BT, C);
    // Bounds: 2 (n + 2) u sum|terms| per element.
    const double k = 2.0 * static_cast<double>(BT + 2) * kU;
    auto ones = FVec(static_cast<size_t>(BT), 1.0f);
    auto xhat = [&](const FVec& x, const FVec& mean, const FVec& rstd) {
      FVec h(x.size());
      for (int64_t i = 0; i < BT; ++i)
        for (int64_t c = 0; c < C; ++c)
          h[static_cast<size_t>(i * C + c)] =
              (x[static_cast<size_t>(i * C + c)] - mean[static_cast<size_t>(i)]) * rstd[static_cast<size_t>(i)];
      return h;
    };
    auto diag = [&](const FVec& a, const FVec& b) {  // sum_i |a[i][c] b[i][c]|
      std::vector<double> s(static_cast<size_t>(C), 0.0);
      for (int64_t i = 0; i < BT; ++i)
        for (int64_t c = 0; c < C; ++c)
          s[static_cast<size_t>(c)] += std::fabs(static_cast<double>(a[static_cast<size_t>(i * C + c)]) *
                                                 static_cast<double>(b[static_cast<size_t>(i * C + c)]));
      return s;
    };
    const FVec h2 = xhat(lc.ref.res1, r.ln2_mean, r.ln2_rstd), h1 = xhat(lc.inp, r.ln1_mean, r.ln1_rstd);
    const FVec one_c(static_cast<size_t>(BT * C), 1.0f);
    struct Check {
      const char* what;
      const FVec *ref, Grads::*got;
      std::vector<double> scale;
    };
    const Check checks[] = {
        {"fcproj_w", &ref_g.fcproj_w, &Grads::fcproj_w, abs_products(dres_in, r.fch_gelu, BT, C, F)},
        {"fcproj_b", &ref_g.fcproj_b, &Grads::fcproj_b, abs_products(dres_in, ones, BT, C, 1)},
        {"fc_w", &ref_g.fc_w, &Grads::fc_w, abs_products(dbig, r.ln2, BT, F, C)},
        {"fc_b", &ref_g.fc_b, &Grads::fc_b, abs_products(dbig, ones, BT, F, 1)},
        {"ln2_w", &ref_g.ln2_w, &Grads::ln2_w, diag(dln2, h2)},
        {"ln2_b", &ref_g.ln2_b, &Grads::ln2_b, diag(dln2, one_c)},
        {"proj_w", &ref_g.proj_w, &Grads::proj_w, abs_products(dres_mid, r.atty, BT, C, C)},
        {"proj_b", &ref_g.proj_b, &Grads::proj_b, abs_products(dres_mid, ones, BT, C, 1)},
        {"qkv_w", &ref_g.qkv_w, &Grads::qkv_w, abs_products(ref_s.dqkv, r.ln1, BT, 3 * C, C)},
        {"qkv_b", &ref_g.qkv_b, &Grads::qkv_b, abs_products(ref_s.dqkv, ones, BT, 3 * C, 1)},
        {"ln1_w", &ref_g.ln1_w, &Grads::ln1_w, diag(dln1, h1)},
        {"ln1_b", &ref_g.ln1_b, &Grads::ln1_b, diag(dln1, one_c)},
    };
    const int saved = omp_get_max_threads();
    std::unique_ptr<Grads> first_g;
    std::unique_ptr<Scratch> first_s;
    for (const int threads : {1, 2, 3}) {
      SCOPED_TRACE(lc.name() + ", threads " + std::to_string(threads));
      omp_set_num_threads(threads);
      auto g = std::make_unique<Grads>();
      auto sc = std::make_unique<Scratch>(dres_in);
      LayerBackwardArgs a{};
      a.inp = lc.inp.data();
      a.ln1 = r.ln1.data(), a.ln1_mean = r.ln1_mean.data(), a.ln1_rstd = r.ln1_rstd.data(), a.qkv = r.qkv.data();
      a.atty = r.atty.data(), a.lse = r.lse.data(), a.res1 = r.res1.data(), a.ln2 = r.ln2.data();
      a.ln2_mean = r.ln2_mean.data(), a.ln2_rstd = r.ln2_rstd.data(), a.fch = r.fch.data();
      // softmax: the GELU's output recomputed from fch (as the model runs it); poly3: given.
      a.fch_gelu = act.activation == Activation::softmax ? nullptr : r.fch_gelu.data();
      a.ln1_w = lc.ln1_w.data(), a.qkv_w = lc.qkv_w.data(), a.proj_w = lc.proj_w.data(), a.ln2_w = lc.ln2_w.data();
      a.fc_w = lc.fc_w.data(), a.fcproj_w = lc.fcproj_w.data();
      a.dres = sc->dres.data();
      a.g_ln1_w = g->ln1_w.data(), a.g_ln1_b = g->ln1_b.data(), a.g_qkv_w = g->qkv_w.data();
      a.g_qkv_b = g->qkv_b.data(), a.g_proj_w = g->proj_w.data(), a.g_proj_b = g->proj_b.data();
      a.g_ln2_w = g->ln2_w.data(), a.g_ln2_b = g->ln2_b.data(), a.g_fc_w = g->fc_w.data(), a.g_fc_b = g->fc_b.data();
      a.g_fcproj_w = g->fcproj_w.data(), a.g_fcproj_b = g->fcproj_b.data();
      layer_backward_fused_cpu(lc.spec, lc.sh, lc.F, a);
      expect_same("dres", ref_s.dres, sc->dres);
      for (const Check& ch : checks) {
        const FVec& want = *ch.ref;
        const FVec& got = (*g).*(ch.got);
        ASSERT_EQ(want.size(), got.size()) << ch.what;
        double worst = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
          const double err = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
          // + 1 ulp of the result: the initial value is added once in both, rounded.
          const double bound = k * ch.scale[i] + std::fabs(static_cast<double>(want[i])) * 2.0 * kU;
          ASSERT_LE(err, bound) << ch.what << "[" << i << "]: fused " << got[i] << ", ops " << want[i];
          worst = std::max(worst, err / bound);
        }
        EXPECT_LT(worst, 1.0) << ch.what;
      }
      if (!first_g) {
        first_g = std::move(g);
        first_s = std::move(sc);
      } else {
        for (auto m : {&Grads::ln1_w, &Grads::ln1_b, &Grads::qkv_w, &Grads::qkv_b, &Grads::proj_w, &Grads::proj_b,
                       &Grads::ln2_w, &Grads::ln2_b, &Grads::fc_w, &Grads::fc_b, &Grads::fcproj_w, &Grads::fcproj_b})
          expect_same("a parameter gradient across thread counts", (*first_g).*m, (*g).*m);
        expect_same("dres across thread counts", first_s->dres, sc->dres);
      }
    }
    omp_set_num_threads(saved);
  }
}

}  // namespace
}  // namespace attnsweep
