// Training throughput of the reference cell on CPU (or on a GPU: DEVICE cuda / cuda:N,
// the same trainer on its CUDA backend): the image task's model at patch 4
// (N = 49 tokens of 16 pixels), dim 64, 4 layers, 4 heads, MLP x4, 10 classes, batch 128,
// AdamW, clipping; softmax attention unless an activation is given. Random inputs
// (the data loader is not what is timed). Prints one CSV line:
//   attnsweep,<activation>,<threads>,<samples/s>,<seconds per step>,<samples per CPU-second>
// (samples per CPU-second, all threads' CPU time: less sensitive than wall time to other
// processes on a shared machine); on a GPU the first field is attnsweep-cuda.
// CELL listops: the long-sequence cell instead, ListOps' shapes: N = 512 token ids of a
// 16-symbol vocabulary embedded by a table, CLS token, dim 64, 4 layers, 4 heads, MLP x4,
// 10 classes, batch 32 (the activation field then reads <activation>-listops).
// CELL image16 / image196: the reference model at patch 7 (N = 16 tokens of 49 pixels) or
// patch 2 (N = 196 of 4), the other prompt lengths of paperA_fmnist (field
// <activation>-image16 ...). CELL large: patch 2 (N = 196), dim 256, 6 layers, 4 heads,
// MLP x4, batch 128 (field <activation>-large).
// usage: trainer_cpu [THREADS] [STEPS] [ACTIVATION] [CELL] [DEVICE]
//   (defaults 2, 30, softmax, reference, cpu)
#include <omp.h>
#include <unistd.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "experiments/rng.h"
#include "kernels/device.h"
#include "worker/cpu_env.h"
#include "worker/cuda_trainer.h"
#include "worker/trainer.h"

extern "C" void openblas_set_num_threads(int);

using namespace attnsweep;

// Times `steps` training steps of tr on random inputs (after 3 warm-up steps) and prints
// the CSV line.
template <class TrainerT>
void time_steps(TrainerT& tr, const ModelConfig& mc, const TrainConfig& tc, int steps, const std::string& act,
                const std::string& where, const char* who, const std::string& suffix) {
  const int64_t B = tc.batch;
  const bool ids = mc.vocab > 0;
  Rng rng(1);
  std::vector<float> x(static_cast<size_t>(B * mc.tokens * mc.in_dim));
  std::vector<int32_t> y(static_cast<size_t>(B));
  for (float& v : x)
    v = ids ? static_cast<float>(static_cast<int>(rng.uniform() * static_cast<double>(mc.vocab)))
            : static_cast<float>(rng.normal());
  for (int32_t& v : y) v = static_cast<int32_t>(rng.uniform() * 10);

  // Logging steps collect the norms: time them as every 50th step does (norms on one
  // step in 50, as log_every = 50).
  for (int t = 0; t < 3; ++t) tr.step(x.data(), y.data(), nullptr, B, t, true);  // warm-up
  auto cpu_now = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  };
  const double c0 = cpu_now();
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < steps; ++t) tr.step(x.data(), y.data(), nullptr, B, 3 + t, t % 50 == 0);
  for (int64_t r = 0; r < tr.devices(); ++r) tr.replica(r).backend().synchronize();  // the last update (GPU)
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = cpu_now() - c0;
  std::printf("%s,%s%s,%s,%.1f,%.4f,%.1f\n", who, act.c_str(), suffix.c_str(), where.c_str(),
              static_cast<double>(B) * steps / s, s / steps, static_cast<double>(B) * steps / cpu);
}

int main(int argc, char** argv) {
  // The same process-start settings as `attnsweep train` (worker/cpu_env.h).
  if (std::getenv("ATTNSWEEP_CPU_ENV_SET") == nullptr) {
    const auto fixes = cpu_env_fixes();
    if (!fixes.empty()) {
      for (const auto& [k, v] : fixes) ::setenv(k.c_str(), v.c_str(), 0);
      ::setenv("ATTNSWEEP_CPU_ENV_SET", "1", 1);
      ::execv("/proc/self/exe", argv);
    }
  }
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 30;
  const std::string act = argc > 3 ? argv[3] : "softmax";
  const std::string cell = argc > 4 ? argv[4] : "reference";
  if (cell != "reference" && cell != "listops" && cell != "image16" && cell != "image196" && cell != "large") {
    std::fprintf(stderr, "trainer_cpu: CELL: expected reference, listops, image16, image196 or large, got %s\n",
                 cell.c_str());
    return 2;
  }
  const bool listops = cell == "listops";
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
  const std::string suffix = cell == "reference" ? "" : "-" + cell;
  json cfg = {{"activation", act}};
  if (act == "poly") cfg["degree"] = 3, cfg["scale"] = "inv_sqrt_n";
  mc.act = activation_spec_of(cfg);
  TrainConfig tc;
  tc.steps = 3000;
  tc.batch = listops ? 32 : 128;
  const std::string device = argc > 5 ? argv[5] : "cpu";
  const int gpu = cuda_device_index(device);
  if (gpu < 0) {
    Trainer tr(mc, tc);
    time_steps(tr, mc, tc, steps, act, std::to_string(threads), "attnsweep", suffix);
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
