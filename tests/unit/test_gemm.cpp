// matmul_forward / matmul_backward (kernels/ops.h) on both CPU paths, the AVX-512 kernels
// of kernels/cpu/gemm.cpp and the OpenBLAS fallback, over shapes that hit every tail of
// the 8 x 32 tiling and the dweight row chunks:
// - against a float64 reference with the rigorous bound of a float32 sum of n terms,
//   |err| <= (n + 2) u sum|terms| (u = 2^-24), whatever the summation order;
// - the AVX-512 path bit for bit against its scalar model (one fmaf chain per element in
//   k order, started at the bias / at 0 and then added), with 1 and 2 threads;
// - guard elements after every output: no write out of bounds.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
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
    {1, 1, 1},     {1, 64, 64},   {2, 3, 5},      {7, 1, 33},     {9, 17, 1},    {8, 32, 32},  {13, 16, 17},
    {31, 33, 47},  {64, 64, 64},  {65, 64, 192},  {130, 256, 64}, {129, 48, 64}, {100, 1, 16}, {3, 300, 70},
    {2100, 24, 40}, {700, 200, 150}, {1, 256, 256}, {257, 31, 7},
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
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << g << ", reference " << ref.val[i]
                                           << ", bound " << bound;
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
        Ref r{std::vector<double>(init.dw.begin(), init.dw.end() - kGuard), std::vector<double>(init.dw.size() - kGuard)};
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

TEST(Gemm, OpenBlasPathMatchesFloat64) { check_against_float64(cpu::GemmPath::OpenBlas); }

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

TEST(Gemm, FusedGeluIsTheUnfusedOpsOpenBlas) { check_fused_gelu(cpu::GemmPath::OpenBlas); }

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

}  // namespace
}  // namespace attnsweep
