// CPU attention forward + backward throughput, next to OpenBLAS SGEMM measured in the
// same process. Prints CSV lines (driven and tabulated by bench/attention_cpu.sh):
//   sgemm,<M>x<N>x<K>,,,<seconds>,<GFLOP/s>
//   attnsweep,<activation>,<N>,<norms on|off>,<seconds>,<GFLOP/s>
// FLOP convention (FlashAttention's, useful work only): forward 4 N^2 d (S = Q K^T and
// P V) and backward 8 N^2 d (dP, dV, dQ, dK) per (batch item, head), 12 BH N^2 d in all;
// the backward's recomputation of S (another 2 N^2 d) is not counted.
//
// usage: attention_cpu [N ...]     (default N = 64 256 1024; d = dv = 64, B*H = 32)
#include "kernels/attention.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using namespace attnsweep;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best (minimum) wall time of fn over enough repetitions to fill ~min_total seconds (at
// least 5): the machine may be shared, and the minimum is the run least disturbed.
template <class F>
double time_best(F&& fn, double min_total = 1.0) {
  fn();  // warm-up: page faults, OpenBLAS buffers
  std::vector<double> t;
  const double start = now();
  while (t.size() < 5 || (now() - start < min_total && t.size() < 200)) {
    const double t0 = now();
    fn();
    t.push_back(now() - t0);
  }
  return *std::min_element(t.begin(), t.end());
}

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& e : x) e = nd(rng);
  return x;
}

void bench_sgemm(int M, int N, int K) {
  std::mt19937 rng(1);
  const auto A = randn(static_cast<size_t>(M) * K, rng), B = randn(static_cast<size_t>(K) * N, rng);
  std::vector<float> C(static_cast<size_t>(M) * N);
  const double t = time_best([&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
                C.data(), N);
  });
  std::printf("sgemm,%dx%dx%d,,,%.6f,%.2f\n", M, N, K, t, 2.0 * M * N * K / t * 1e-9);
}

void bench_attention(const char* name, ActivationSpec act, int64_t N) {
  AttentionShape sh;
  sh.B = 1;
  sh.H = 32;
  sh.Nq = sh.Nk = N;
  sh.d = sh.dv = 64;
  const int64_t BH = sh.B * sh.H;
  std::mt19937 rng(2);
  const auto q = randn(BH * N * sh.d, rng), k = randn(BH * N * sh.d, rng), v = randn(BH * N * sh.dv, rng),
             dO = randn(BH * N * sh.dv, rng);
  std::vector<float> O(BH * N * sh.dv), lse(BH * N), dQ(q.size()), dK(k.size()), dV(v.size());
  std::vector<double> attn(BH), jac(BH);
  const double flops = 12.0 * BH * N * N * sh.d;
  for (bool norms : {true, false}) {
    AttentionSpec spec;
    spec.act = act;
    spec.collect_norms = norms;
    const double t = time_best([&] {
      attention_forward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), lse.data(), attn.data(),
                            jac.data());
      attention_backward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), dO.data(), lse.data(),
                             dQ.data(), dK.data(), dV.data());
    });
    std::printf("attnsweep,%s,%lld,%s,%.6f,%.2f\n", name, static_cast<long long>(N), norms ? "on" : "off", t,
                flops / t * 1e-9);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ns;
  for (int i = 1; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty()) Ns = {64, 256, 1024};
  // The baseline: a square SGEMM (2.1 GFLOP, about the work of one attention pass at
  // N = 1024 per 4 heads), through the same OpenBLAS with the same threads.
  bench_sgemm(1024, 1024, 1024);
  for (int64_t N : Ns) {
    bench_attention("softmax", {Activation::softmax, 1, ScaleKind::none, 1.0}, N);
    bench_attention("poly3_inv_sqrt_n", {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0}, N);
    bench_attention("relu_inv_n", {Activation::relu, 1, ScaleKind::inv_n, 1.0}, N);
  }
  return 0;
}
