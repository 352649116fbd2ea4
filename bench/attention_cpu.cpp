// CPU attention forward + backward throughput, next to OpenBLAS SGEMM measured in the
// same process. Prints CSV lines (driven and tabulated by bench/attention_cpu.sh):
//   sgemm,<activation>,<N>,,<seconds>,<GFLOP/s>   (1024^3, timed alongside that config)
//   attnsweep,<activation>,<N>,<norms on|off>,<seconds>,<GFLOP/s>
// FLOP convention (FlashAttention's, useful work only): forward 4 N^2 d (S = Q K^T and
// P V) and backward 8 N^2 d (dP, dV, dQ, dK) per (batch item, head), 12 BH N^2 d in all;
// the backward's recomputation of S (another 2 N^2 d) is not counted.
//
// usage: attention_cpu [N ...]     (default N = 64 256 1024; d = dv = 64, B*H = 32)
//        ATTN_BENCH_SECONDS=s         time per configuration (default 3)
#include "base/options.h"
#include "kernels/attention.h"

#include <cblas.h>
#include <omp.h>
#include <time.h>

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

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& e : x) e = nd(rng);
  return x;
}

// The baseline: a square SGEMM (2.1 GFLOP, comparable to one attention forward+backward
// at N = 256..1024 over a few heads), through the same OpenBLAS with the same threads.
struct Sgemm {
  static constexpr int n = 1024;
  std::vector<float> A, B, C;
  Sgemm() {
    std::mt19937 rng(1);
    A = randn(static_cast<size_t>(n) * n, rng);
    B = randn(static_cast<size_t>(n) * n, rng);
    C.resize(static_cast<size_t>(n) * n);
  }
  void operator()() {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
  }
  static double flops() { return 2.0 * n * n * n; }
};

// The machine may be shared: the SGEMM baseline and our kernel with norms on and off are
// timed in alternating phases (so all three see the same load) for ~min_total seconds
// (at least 2 cycles), and the best (minimum) time of each is kept.
void bench_attention(const char* name, ActivationSpec act, int64_t N, Sgemm& sgemm, double min_total) {
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
  auto attention = [&](bool norms) {
    AttentionSpec spec;
    spec.act = act;
    spec.collect_norms = norms;
    attention_forward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), lse.data(), attn.data(),
                          jac.data());
    attention_backward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), dO.data(), lse.data(), dQ.data(),
                           dK.data(), dV.data());
  };
  // One phase: fn repeated for ~phase seconds (at least 3 calls), its best time. Calls are
  // grouped in phases, not alternated, because the threads of OpenBLAS and of OpenMP
  // spin for a while after their work and would slow down the next call of the other.
  auto phase = [](auto&& fn, double seconds) {
    double best = 1e30;
    const double start = now();
    for (int i = 0; i < 3 || now() - start < seconds; ++i) {
      const double t0 = now();
      fn();
      best = std::min(best, now() - t0);
    }
    return best;
  };
  attention(true);  // warm-up: page faults, OpenBLAS buffers
  double best_sg = 1e30, best_on = 1e30, best_off = 1e30;
  const double start = now();
  for (int cycle = 0; cycle < 2 || now() - start < min_total; ++cycle) {
    best_sg = std::min(best_sg, phase([&] { sgemm(); }, min_total / 12));
    best_on = std::min(best_on, phase([&] { attention(true); }, min_total / 6));
    best_off = std::min(best_off, phase([&] { attention(false); }, min_total / 6));
  }
  const double flops = 12.0 * BH * N * N * sh.d;
  std::printf("sgemm,%s,%lld,,%.6f,%.2f\n", name, static_cast<long long>(N), best_sg, Sgemm::flops() / best_sg * 1e-9);
  std::printf("attnsweep,%s,%lld,on,%.6f,%.2f\n", name, static_cast<long long>(N), best_on, flops / best_on * 1e-9);
  std::printf("attnsweep,%s,%lld,off,%.6f,%.2f\n", name, static_cast<long long>(N), best_off, flops / best_off * 1e-9);
  std::fflush(stdout);
}

}  // namespace

// --profile on|off ACTIVATION N: one forward + backward (B*H = 4), nothing else: for
// counting instructions under valgrind --tool=callgrind --toggle-collect='attnsweep::attention_*'
// (the cost of the norms, independent of the machine's load).
int profile_once(bool norms, const std::string& act, int64_t N) {
  ActivationSpec a{Activation::softmax, 1, ScaleKind::none, 1.0};
  if (act == "poly3_inv_sqrt_n")
    a = {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0};
  else if (act == "relu_inv_n")
    a = {Activation::relu, 1, ScaleKind::inv_n, 1.0};
  else if (act != "softmax")
    return 2;
  AttentionShape sh;
  sh.H = 4;
  sh.Nq = sh.Nk = N;
  sh.d = sh.dv = 64;
  std::mt19937 rng(2);
  const size_t n = static_cast<size_t>(sh.H * N * 64);
  const auto q = randn(n, rng), k = randn(n, rng), v = randn(n, rng), dO = randn(n, rng);
  std::vector<float> O(n), lse(static_cast<size_t>(sh.H * N)), dQ(n), dK(n), dV(n);
  std::vector<double> attn(4), jac(4);
  AttentionSpec spec;
  spec.act = a;
  spec.collect_norms = norms;
  attention_forward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), lse.data(), attn.data(), jac.data());
  attention_backward_cpu(spec, sh, q.data(), k.data(), v.data(), nullptr, O.data(), dO.data(), lse.data(), dQ.data(),
                         dK.data(), dV.data());
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--profile")
    return profile_once(std::string(argv[2]) == "on", argv[3], std::atoll(argv[4]));
  std::vector<int64_t> Ns;
  for (int i = 1; i < argc; ++i) Ns.push_back(std::atoll(argv[i]));
  if (Ns.empty()) Ns = {64, 256, 1024};
  Sgemm sgemm;
  sgemm();
  const double min_total = options::bench_seconds(3.0);
  for (int64_t N : Ns) {
    bench_attention("softmax", {Activation::softmax, 1, ScaleKind::none, 1.0}, N, sgemm, min_total);
    bench_attention("poly3_inv_sqrt_n", {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0}, N, sgemm, min_total);
    bench_attention("relu_inv_n", {Activation::relu, 1, ScaleKind::inv_n, 1.0}, N, sgemm, min_total);
  }
  return 0;
}
