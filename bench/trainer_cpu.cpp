// Training throughput of the reference cell on CPU (or on a GPU: DEVICE cuda / cuda:N,
// the same trainer on its CUDA backend): the image task's model at patch 4
// (N = 49 tokens of 16 pixels), dim 64, 4 layers, 4 heads, MLP x4, 10 classes, batch 128,
// AdamW, clipping; softmax attention unless an activation is given. Random inputs
// (the data loader is not what is timed). Prints one CSV line:
//   attnsweep,<activation>,<threads>,<samples/s>,<seconds per step>,<samples per CPU-second>,
//   <precision>,<wall ms per step>,<kernel ms per step>,<host ms per step>
// (samples per CPU-second, all threads' CPU time: less sensitive than wall time to other
// processes on a shared machine); on a GPU the first field is attnsweep-cuda. The last
// four fields were appended for bench/gpu-check.sh stage 8 (readers of the first six are
// unchanged): on a GPU the kernel time is the sum of the time inside the backend's ops
// (CudaBackend::time_kernels / take_kernel_ms, replica 0) over a second pass of the
// same STEPS steps, divided by STEPS, and host = wall - kernel; the timed pass itself runs
// without the timer's events. On the CPU kernel and host read nan.
// CELL listops: the long-sequence cell instead, ListOps' shapes: N = 512 token ids of a
// 16-symbol vocabulary embedded by a table, CLS token, dim 64, 4 layers, 4 heads, MLP x4,
// 10 classes, batch 32, no padding (the activation field then reads <activation>-listops).
// CELL image16 / image196: the reference model at patch 7 (N = 16 tokens of 49 pixels) or
// patch 2 (N = 196 of 4), the other prompt lengths of paperA_fmnist (field
// <activation>-image16 ...). CELL large: patch 2 (N = 196), dim 256, 6 layers, 4 heads,
// MLP x4, batch 128 (field <activation>-large).
// CELL listops2000: LRA's ListOps at its length as the listops task trains it: N = 2000
// token ids (vocab 16, pad id 0, experiments/listops.h), CLS token, 2 layers, dim 64,
// 2 heads, MLP x4, batch 32, with real padding: sample b has
// listops2000_length(b) = 500 + (b * 7919) % 1501 real tokens (LRA's lengths 500..2000;
// the same lengths in bench/trainer_cpu.py), the rest pad, so the key mask and the
// norms of the real query rows are exercised.
// CELL paperB1000: paper B's one-layer read-out (experiments/icl_regression.cpp) at
// L = 1000 prompt tokens: d = 5, tokens (x, y) of width C = 6, one head of width 6, the
// query last, MSE on the query's last output coordinate, plain SGD lr 1e-3 without
// clipping or decay, batch 128, norms on one step in 1000 (paperB_icl's log_every). The
// prompts are fixed random inputs: the host's prompt generation is not timed here.
// PRECISION fp32 | bf16 | tf32 (ModelConfig::precision; the CPU trains fp32 only and
// refuses the others, exit 1). ATTNSWEEP_CUDA_GRAPHS=1 on a GPU: the steps that do not
// log replay a CUDA graph (TrainConfig::cuda_graphs); the precision field gains +graphs.
// usage: trainer_cpu [THREADS] [STEPS] [ACTIVATION] [CELL] [DEVICE] [PRECISION]
//   (defaults 2, 30, softmax, reference, cpu, fp32)
// For rehearsing bench/gpu-check.sh on a CPU only (REHEARSE=1; the figures then mean
// nothing): ATTNSWEEP_BENCH_WARMUP (warm-up steps, default 3) and ATTNSWEEP_BENCH_BATCH
// (overrides the cell's batch).
#include <omp.h>
#include <unistd.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "base/cpu_env.h"
#include "base/options.h"
#include "experiments/listops.h"
#include "experiments/params.h"
#include "experiments/rng.h"
#include "kernels/device.h"
#include "kernels/precision.h"
#include "worker/training/cuda_trainer.h"
#include "worker/training/trainer.h"

extern "C" void openblas_set_num_threads(int);

using namespace attnsweep;

// Real tokens of sample b of the listops2000 cell (the rest is padding); the same formula
// in bench/trainer_cpu.py.
int64_t listops2000_length(int64_t b) {
  return 500 + (b * 7919) % 1501;
}

// Kernel ms per step of `steps` more steps of tr (the sum over its ops, replica 0), or
// NaN on a backend without the kernel timer (the CPU).
template <class TrainerT>
double kernel_ms_per_step(TrainerT& tr, const float* x, const int32_t* y, const float* yv, int64_t B, int steps,
                          int log_every) {
  if constexpr (requires { tr.model().backend().take_kernel_ms(); }) {
    auto& be = tr.model().backend();
    be.take_kernel_ms();  // drop anything recorded before
    be.time_kernels(true);
    for (int t = 0; t < steps; ++t) tr.step(x, y, yv, B, 3 + steps + t, t % log_every == 0);
    const double ms = be.take_kernel_ms();
    be.time_kernels(false);
    return ms / steps;
  } else {
    (void)tr, (void)x, (void)y, (void)yv, (void)B, (void)steps, (void)log_every;
    return std::nan("");
  }
}

// Times `steps` training steps of tr on random inputs (after 3 warm-up steps) and prints
// the CSV line.
template <class TrainerT>
void time_steps(TrainerT& tr, const ModelConfig& mc, const TrainConfig& tc, int steps, const std::string& act,
                const std::string& where, const char* who, const std::string& suffix) {
  const int64_t B = tc.batch;
  const bool ids = mc.vocab > 0;
  const bool readout = mc.head == Head::readout;
  Rng rng(1);
  std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim));
  std::vector<int32_t> y(static_cast<size_t>(B));
  std::vector<float> yv(static_cast<size_t>(B));
  for (float& v : x)
    v = ids ? static_cast<float>(static_cast<int>(rng.uniform() * static_cast<double>(mc.vocab)))
            : static_cast<float>(rng.normal());
  if (mc.pad_id >= 0) {  // real ids 1..vocab-1 up to the sample's length, then padding
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < mc.tokens; ++t)
        x[static_cast<size_t>(b * mc.tokens + t)] =
            t < listops2000_length(b)
                ? static_cast<float>(1 + static_cast<int>(rng.uniform() * static_cast<double>(mc.vocab - 1)))
                : static_cast<float>(mc.pad_id);
  }
  for (int32_t& v : y) v = static_cast<int32_t>(rng.uniform() * 10);
  for (float& v : yv) v = static_cast<float>(rng.normal());
  const int32_t* yc = readout ? nullptr : y.data();
  const float* yval = readout ? yv.data() : nullptr;
  // Logging steps collect the norms: time them as the cell's log_every does (one step in
  // 50; paper B's read-out one in 1000).
  const int log_every = readout ? 1000 : 50;

  const int warmup = options::bench_warmup(3);
  for (int t = 0; t < warmup; ++t) tr.step(x.data(), yc, yval, B, t, true);
  for (int64_t r = 0; r < tr.devices(); ++r) tr.replica(r).backend().synchronize();
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double c0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < steps; ++t) tr.step(x.data(), yc, yval, B, 3 + t, t % log_every == 0);
  for (int64_t r = 0; r < tr.devices(); ++r) tr.replica(r).backend().synchronize();  // the last update (GPU)
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_now() - c0;
  const double wall_ms = 1e3 * s / steps;
  const double kernel_ms = kernel_ms_per_step(tr, x.data(), yc, yval, B, steps, log_every);
  std::printf("%s,%s%s,%s,%.1f,%.4f,%.1f,%s,%.4f,%.4f,%.4f\n", who, act.c_str(), suffix.c_str(), where.c_str(),
              static_cast<double>(B) * steps / s, s / steps, static_cast<double>(B) * steps / cpu,
              (std::string(precision_name(mc.precision)) + (tc.cuda_graphs ? "+graphs" : "")).c_str(), wall_ms,
              kernel_ms, wall_ms - kernel_ms);
}

int main(int argc, char** argv) {
  // The same process-start settings as `attnsweep train` (base/cpu_env.h).
  if (!options::cpu_env_set()) {
    const auto fixes = cpu_env_fixes();
    if (!fixes.empty()) {
      for (const auto& [k, v] : fixes) ::setenv(k.c_str(), v.c_str(), 0);
      ::setenv(options::kCpuEnvSet, "1", 1);
      ::execv("/proc/self/exe", argv);
    }
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const std::string act = argc > 3 ? argv[3] : "softmax";
  const std::string cell = argc > 4 ? argv[4] : "reference";
  if (cell != "reference" && cell != "listops" && cell != "image16" && cell != "image196" && cell != "large" &&
      cell != "listops2000" && cell != "paperB1000") {
    std::fprintf(stderr,
                 "trainer_cpu: CELL: expected reference, listops, image16, image196, large, listops2000 or "
                 "paperB1000, got %s\n",
                 cell.c_str());
    return 2;
  }
  const bool listops = cell == "listops" || cell == "listops2000";
  const bool paper_b = cell == "paperB1000";
  Precision precision = Precision::fp32;
  try {
    precision = parse_precision(argc > 6 ? argv[6] : "fp32");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_cpu: PRECISION: %s\n", e.what());
    return 2;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(1);  // as train_cell: the GEMMs split rows over the OpenMP team

  ModelConfig mc;
  mc.tokens = 49;
  mc.in_dim = 16;
  mc.dim = 64;
  mc.layers = 4;
  mc.heads = 4;
  mc.mlp_ratio = 4;
  mc.classes = 10;
  if (listops) mc.tokens = 512, mc.in_dim = 1, mc.vocab = 16, mc.cls = true;
  if (cell == "image16") mc.tokens = 16, mc.in_dim = 49;
  if (cell == "image196" || cell == "large") mc.tokens = 196, mc.in_dim = 4;
  if (cell == "large") mc.dim = 256, mc.layers = 6;
  if (cell == "listops2000") mc.tokens = 2000, mc.layers = 2, mc.heads = 2, mc.pad_id = kListOpsPad;
  if (paper_b) {  // the read-out at d = 5: C = d + 1, L + 1 tokens (experiments/icl_regression.cpp)
    mc.head = Head::readout;
    mc.tokens = 1001, mc.in_dim = 6, mc.dim = 6, mc.layers = 1, mc.heads = 1, mc.classes = 0;
  }
  mc.precision = precision;
  const std::string suffix = cell == "reference" ? "" : "-" + cell;
  json cfg = {{"activation", act}};
  if (act == "poly") cfg["degree"] = 3, cfg["scale"] = "inv_sqrt_n";
  mc.act = activation_spec_of(cfg);
  TrainConfig tc;
  tc.steps = 3000;
  tc.batch = listops ? 32 : 128;
  if (const int b = options::bench_batch(); b > 0) tc.batch = b;
  if (paper_b) {  // paper B's optimiser (its TaskDef::training_defaults, paperB_icl's lr)
    tc.optimizer = "sgd", tc.lr = 1e-3, tc.weight_decay = 0, tc.clip = 0, tc.warmup_steps = 0;
    tc.lr_schedule = "constant";
  }
  const std::string device = argc > 5 ? argv[5] : "cpu";
  const int gpu = cuda_device_index(device);
  // Launch-free steps on CUDA as train_cell has them (ATTNSWEEP_CUDA_GRAPHS=1; the
  // precision field then reads e.g. fp32+graphs).
  tc.cuda_graphs = device != "cpu" && options::cuda_graphs();
  if (gpu < 0) {
    try {
      Trainer tr(mc, tc);
      time_steps(tr, mc, tc, steps, act, std::to_string(threads), "attnsweep", suffix);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "trainer_cpu: cpu: %s\n", e.what());
      return 1;
    }
    return 0;
  }
#ifdef ATTNSWEEP_HAVE_CUDA
  try {
    CudaTrainer tr(mc, tc, gpu);
    time_steps(tr, mc, tc, steps, act, device, "attnsweep-cuda", suffix);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer_cpu: %s: %s\n", device.c_str(), e.what());
    return 1;
  }
  return 0;
#else
  std::fprintf(stderr, "trainer_cpu: %s: this build has no CUDA backend\n", device.c_str());
  return 2;
#endif
}
