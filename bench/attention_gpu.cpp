// Fused CUDA attention throughput: TFLOP/s of forward and backward for softmax,
// s^3/sqrt(N) (poly3 inv_sqrt_n) and ReLU/N (relu inv_n), N = 1024, 4096, 16384,
// d = 64, 128, bf16 and fp32, norms on and off; ratio against the materialising cuBLAS
// path (fp32 inputs) measured in the same run where its N x N scratch fits.
// Shapes follow FlashAttention-2's benchmark: batch * N = 16k tokens, H * d = 2048.
// FLOPs: forward 4 B H N^2 d; backward 2.5x forward (FA2's convention; the kernels here
// recompute S in both backward kernels, so they execute more than that).
// Usage: attention_gpu [--quick]   (--quick: N = 1024, 4096 only)
//        attention_gpu --mma [--quick]: the tensor-core forward (attention_forward_cuda_mma,
//        bf16 and fp16) against the fused CUDA-core forward (bf16) at d = 64, 128,
//        N = 1024, 4096, 16384, softmax / poly3 / relu / sigmoid, norms on and off;
//        the same shapes as bench/attention_gpu_torch.py's SDPA rows; and the tensor-core
//        backward (attention_backward_cuda_mma, bf16) against the fused backward.
#ifdef ATTNSWEEP_HAVE_CUDA

#include "kernels/attention.h"
#include "kernels/attention_cuda.h"

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace attnsweep;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { check(cudaMalloc(&p, bytes), "cudaMalloc"); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  ~Buf() { cudaFree(p); }
};

// Random N(0,1) data written as fp32 or bf16 (round to nearest even).
void fill_random(void* dst, int64_t n, bool bf16, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  if (bf16) {
    std::vector<uint16_t> h(n);
    for (auto& x : h) {
      const float f = normal(rng);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      x = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    check(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice), "upload");
  } else {
    std::vector<float> h(n);
    for (auto& x : h) x = normal(rng);
    check(cudaMemcpy(dst, h.data(), n * 4, cudaMemcpyHostToDevice), "upload");
  }
}

// Median-free simple timing: one warm-up call, then repeat until 0.25 s or 20 runs.
template <class F>
double time_ms(F&& f) {
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  f();
  check(cudaDeviceSynchronize(), "warm-up");
  double total = 0.0;
  int reps = 0;
  while (reps < 20 && (reps < 2 || total < 250.0)) {
    check(cudaEventRecord(a), "record");
    f();
    check(cudaEventRecord(b), "record");
    check(cudaEventSynchronize(b), "sync");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, a, b), "elapsed");
    total += ms;
    ++reps;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return total / reps;
}

struct Act {
  const char* name;
  ActivationSpec spec;
};

// N(0,1) as IEEE half (round to nearest even; |x| < 8 here, never subnormal-relevant
// for timing).
void fill_random_f16(void* dst, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint16_t> h(n);
  for (auto& x : h) {
    const float f = normal(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
    if (a < 0x38800000u) {  // below 2^-14: flush (timing data only)
      x = static_cast<uint16_t>(sign);
      continue;
    }
    uint32_t v = (((a >> 23) - 112) << 10) | ((a >> 13) & 0x3ffu);
    const uint32_t rest = a & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (v & 1u))) ++v;
    x = static_cast<uint16_t>(sign | v);
  }
  check(cudaMemcpy(dst, h.data(), n * 2, cudaMemcpyHostToDevice), "upload");
}

int run_mma(bool quick) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  std::printf("tensor-core forward (mma) vs the fused CUDA-core forward (bf16), same shapes\n");
  std::printf("%4s %6s %3s %3s %-18s %-5s %9s %8s %9s %8s %9s %8s %7s %9s %9s %7s\n", "d", "N", "B", "H", "activation",
              "norms", "mma_bf16", "TF", "mma_f16", "TF", "fused", "TF", "x", "bwd_mma", "bwd_fus", "bwd_x");
  std::vector<Act> acts(4);
  acts[0] = {"softmax", {}};
  acts[1] = {"poly3_inv_sqrt_n", {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0}};
  acts[2] = {"relu_inv_n", {Activation::relu, 1, ScaleKind::inv_n, 1.0}};
  acts[3] = {"sigmoid", {Activation::sigmoid, 1, ScaleKind::none, 1.0}};
  AttentionCudaWorkspace* ws = attention_cuda_workspace_create();
  std::vector<int64_t> lengths = {1024, 4096, 16384};
  if (quick) lengths.pop_back();
  for (const int64_t d : {64, 128})
    for (const int64_t N : lengths) {
      AttentionShape sh;
      sh.B = 16384 / N;
      sh.H = 2048 / d;
      sh.Nq = sh.Nk = N;
      sh.d = sh.dv = d;
      const int64_t elems = sh.B * sh.H * N * d;
      Buf Qb(elems * 2), Kb(elems * 2), Vb(elems * 2), Qh(elems * 2), Kh(elems * 2), Vh(elems * 2), O(elems * 2);
      Buf lse(sh.B * sh.H * N * 4), attn(sh.B * sh.H * 8), jac(sh.B * sh.H * 8);
      Buf dO(elems * 2), dQ(elems * 2), dK(elems * 2), dV(elems * 2);
      fill_random(dO.p, elems, true, 4);
      fill_random(Qb.p, elems, true, 1);
      fill_random(Kb.p, elems, true, 2);
      fill_random(Vb.p, elems, true, 3);
      fill_random_f16(Qh.p, elems, 1);
      fill_random_f16(Kh.p, elems, 2);
      fill_random_f16(Vh.p, elems, 3);
      const double flop = 4.0 * sh.B * sh.H * double(N) * N * d;
      for (const Act& act : acts)
        for (const bool norms : {true, false}) {
          AttentionSpec spec;
          spec.act = act.spec;
          spec.collect_norms = norms;
          float* L = static_cast<float*>(lse.p);
          double* A = static_cast<double*>(attn.p);
          double* J = static_cast<double*>(jac.p);
          const double mb = time_ms([&] {
            attention_forward_cuda_mma(spec, sh, CudaDType::bf16, Qb.p, Kb.p, Vb.p, nullptr, O.p, L, A, J, ws, nullptr);
          });
          const double mh = time_ms([&] {
            attention_forward_cuda_mma(spec, sh, CudaDType::f16, Qh.p, Kh.p, Vh.p, nullptr, O.p, L, A, J, ws, nullptr);
          });
          const double fb = time_ms([&] {
            attention_forward_cuda(spec, sh, CudaDType::bf16, Qb.p, Kb.p, Vb.p, nullptr, O.p, L, A, J, ws, nullptr);
          });
          // Backward (bf16, from the fused forward's O and lse, just computed): once per activation.
          double bm = NAN, bfu = NAN;
          if (norms) {
            bm = time_ms([&] {
              attention_backward_cuda_mma(spec, sh, CudaDType::bf16, Qb.p, Kb.p, Vb.p, nullptr, O.p, dO.p, L, dQ.p,
                                          dK.p, dV.p, ws, nullptr);
            });
            bfu = time_ms([&] {
              attention_backward_cuda(spec, sh, CudaDType::bf16, Qb.p, Kb.p, Vb.p, nullptr, O.p, dO.p, L, dQ.p, dK.p,
                                      dV.p, ws, nullptr);
            });
          }
          std::printf(
              "%4lld %6lld %3lld %3lld %-18s %-5s %9.3f %8.2f %9.3f %8.2f %9.3f %8.2f %7.2f %9.3f %9.3f %7.2f\n",
              static_cast<long long>(d), static_cast<long long>(N), static_cast<long long>(sh.B),
              static_cast<long long>(sh.H), act.name, norms ? "on" : "off", mb, flop / (mb * 1e9), mh,
              flop / (mh * 1e9), fb, flop / (fb * 1e9), fb / mb, bm, bfu, bfu / bm);
          std::fflush(stdout);
        }
    }
  attention_cuda_workspace_destroy(ws);
  std::printf(
      "ms per forward; TF: TFLOP/s (4 B H N^2 d); x: fused bf16 ms / mma bf16 ms; bwd_*: ms per backward "
      "(bf16, mma and fused), bwd_x = fused / mma\n");
  return 0;
}

int run(bool quick) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    std::printf("SKIPPED: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "properties");
  std::printf("device: %s (sm_%d%d), %.0f GiB\n", prop.name, prop.major, prop.minor,
              prop.totalGlobalMem / 1073741824.0);
  std::printf("baseline: materialising cuBLAS fp32 path (attention_*_cuda_ref), same run, same shape\n");
  std::printf("%-5s %4s %6s %3s %3s %-18s %-5s %9s %8s %9s %8s %9s %9s %8s\n", "dtype", "d", "N", "B", "H",
              "activation", "norms", "fwd_ms", "fwd_TF", "bwd_ms", "bwd_TF", "ref_fwd", "ref_bwd", "fwd_x");

  std::vector<Act> acts(3);
  acts[0] = {"softmax", {}};
  acts[1] = {"poly3_inv_sqrt_n", {Activation::poly, 3, ScaleKind::inv_sqrt_n, 1.0}};
  acts[2] = {"relu_inv_n", {Activation::relu, 1, ScaleKind::inv_n, 1.0}};
  AttentionCudaWorkspace* ws = attention_cuda_workspace_create();

  std::vector<int64_t> lengths = {1024, 4096, 16384};
  if (quick) lengths.pop_back();
  for (const bool bf16 : {true, false})
    for (const int64_t d : {64, 128})
      for (const int64_t N : lengths) {
        AttentionShape sh;
        sh.B = 16384 / N;
        sh.H = 2048 / d;
        sh.Nq = sh.Nk = N;
        sh.d = sh.dv = d;
        const int64_t elems = sh.B * sh.H * N * d;
        const size_t es = bf16 ? 2 : 4;
        Buf Q(elems * es), K(elems * es), V(elems * es), O(elems * es), dO(elems * es);
        Buf dQ(elems * es), dK(elems * es), dV(elems * es), lse(sh.B * sh.H * N * 4);
        Buf attn(sh.B * sh.H * 8), jac(sh.B * sh.H * 8);
        fill_random(Q.p, elems, bf16, 1);
        fill_random(K.p, elems, bf16, 2);
        fill_random(V.p, elems, bf16, 3);
        fill_random(dO.p, elems, bf16, 4);
        const double fwd_flop = 4.0 * sh.B * sh.H * double(N) * N * d;
        const CudaDType dt = bf16 ? CudaDType::bf16 : CudaDType::f32;
        // The reference needs two fp32 [B,H,N,N] scratch matrices; skip it beyond ~40 GB.
        const bool with_ref = !bf16 && 2.0 * 4 * sh.B * sh.H * double(N) * N < 40e9;
        for (const Act& act : acts)
          for (const bool norms : {true, false}) {
            AttentionSpec spec;
            spec.act = act.spec;
            spec.collect_norms = norms;
            const double f_ms = time_ms([&] {
              attention_forward_cuda(spec, sh, dt, Q.p, K.p, V.p, nullptr, O.p, static_cast<float*>(lse.p),
                                     static_cast<double*>(attn.p), static_cast<double*>(jac.p), ws, nullptr);
            });
            // The backward does not depend on collect_norms: time it once per activation.
            double b_ms = NAN, rf_ms = NAN, rb_ms = NAN;
            if (norms) {
              b_ms = time_ms([&] {
                attention_backward_cuda(spec, sh, dt, Q.p, K.p, V.p, nullptr, O.p, dO.p, static_cast<float*>(lse.p),
                                        dQ.p, dK.p, dV.p, ws, nullptr);
              });
            }
            if (with_ref && norms) {
              const auto f = [](void* p) { return static_cast<float*>(p); };
              rf_ms = time_ms([&] {
                attention_forward_cuda_ref(spec, sh, f(Q.p), f(K.p), f(V.p), nullptr, f(O.p), f(lse.p),
                                           static_cast<double*>(attn.p), static_cast<double*>(jac.p), ws, nullptr);
              });
              rb_ms = time_ms([&] {
                attention_backward_cuda_ref(spec, sh, f(Q.p), f(K.p), f(V.p), nullptr, f(O.p), f(dO.p), f(lse.p),
                                            f(dQ.p), f(dK.p), f(dV.p), ws, nullptr);
              });
            }
            std::printf("%-5s %4lld %6lld %3lld %3lld %-18s %-5s %9.3f %8.2f %9.3f %8.2f %9.3f %9.3f %8.2f\n",
                        bf16 ? "bf16" : "fp32", static_cast<long long>(d), static_cast<long long>(N),
                        static_cast<long long>(sh.B), static_cast<long long>(sh.H), act.name, norms ? "on" : "off",
                        f_ms, fwd_flop / (f_ms * 1e9), b_ms, 2.5 * fwd_flop / (b_ms * 1e9), rf_ms, rb_ms, rf_ms / f_ms);
            std::fflush(stdout);
          }
      }
  attention_cuda_workspace_destroy(ws);
  std::printf("fwd_TF, bwd_TF: TFLOP/s; ref_*: ms of the materialising path; fwd_x: ref_fwd / fwd_ms; nan: not run\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, mma = false;
  for (int i = 1; i < argc; ++i) {
    quick |= std::string(argv[i]) == "--quick";
    mma |= std::string(argv[i]) == "--mma";
  }
  try {
    return mma ? run_mma(quick) : run(quick);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_gpu: %s\n", e.what());
    return 1;
  }
}

#else

#include <cstdio>

int main() {
  std::printf("SKIPPED: built without CUDA\n");
  return 0;
}

#endif  // ATTNSWEEP_HAVE_CUDA
