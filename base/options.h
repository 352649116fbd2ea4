// Every environment variable attnsweep reads, in one place (docs/command-line.md lists
// them for users). Nothing else calls getenv (tests/lint/include_layers.py). Two kinds:
//
//  - attnsweep's own toggles (ATTNSWEEP_*), each with a typed accessor below: opt-ins for
//    what has not run on a GPU yet, A/B switches for timing, overrides for machines and
//    tests, and the two a parent sets for its child. An unset variable is the default.
//  - what the launcher, the scheduler or the OS set (MPI's and Slurm's ranks and ids,
//    CUDA_VISIBLE_DEVICES, TMPDIR, ...): read through launcher_env(), which refuses an
//    ATTNSWEEP_* name at compile time, so that every toggle has its accessor here.
//
// Each accessor reads the environment when called; the callers that must not see a change
// mid-run (the CPU kernels' paths, the tensor-core opt-in) call it once, at their first use.
// The emulated CUDA device (emulator/) reads its own variables, as a CUDA driver reads its.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace attnsweep::options {

namespace detail {
inline const char* get(const char* name) {
  return std::getenv(name);
}
inline bool equals(const char* name, const char* value) {
  const char* v = get(name);
  return v != nullptr && std::strcmp(v, value) == 0;
}
// The variable as a whole number >= lo, or -1 when unset or empty; anything else is an
// error naming the variable, its value and what was expected.
inline int whole_number(const char* name, int lo) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < lo || n > 1'000'000)
    throw std::runtime_error(std::string("environment variable ") + name + "=" + v +
                             ": expected a whole number >= " + std::to_string(lo));
  return static_cast<int>(n);
}
// The variable's value, or "" when unset.
inline std::string text(const char* name) {
  const char* v = get(name);
  return v != nullptr ? v : "";
}
}  // namespace detail

// ---- the toggles -------------------------------------------------------------------------

// ATTNSWEEP_CPU_GEMM=openblas: the CPU GEMMs through OpenBLAS only (A/B timing of the
// own AVX-512 kernels, kernels/cpu/gemm.cpp). Default: the own kernels where they apply.
inline bool cpu_gemm_openblas() {
  return detail::equals("ATTNSWEEP_CPU_GEMM", "openblas");
}
// ATTNSWEEP_CPU_LAYER_FUSION=0: the CPU trainer's layer unfused (A/B timing). Default on.
inline bool cpu_layer_fusion() {
  return !detail::equals("ATTNSWEEP_CPU_LAYER_FUSION", "0");
}
// ATTNSWEEP_READOUT_ALGEBRA=0: paper B's read-out by the generic op sequence instead of
// its algebra (A/B timing and checks). Default on.
inline bool readout_algebra() {
  return !detail::equals("ATTNSWEEP_READOUT_ALGEBRA", "0");
}
// ATTNSWEEP_CUDA_MMA=1: the tensor-core attention kernels for bf16 at d 64/128 (opt-in
// until a GPU has run them).
inline bool cuda_mma() {
  return detail::equals("ATTNSWEEP_CUDA_MMA", "1");
}
// ATTNSWEEP_CUDA_GRAPHS=1: the CUDA trainer's steps captured into graphs (opt-in, #20).
inline bool cuda_graphs() {
  return detail::equals("ATTNSWEEP_CUDA_GRAPHS", "1");
}
// ATTNSWEEP_CUDA_DEVICE_BATCHES=1: training batches made on the device where the task can
// (opt-in, #28).
inline bool cuda_device_batches() {
  return detail::equals("ATTNSWEEP_CUDA_DEVICE_BATCHES", "1");
}

// ATTNSWEEP_GPU_BIND: how a node's ranks share its GPUs: local (the default: by local
// rank) or none (every rank sees every GPU). Anything else is an error naming the value.
enum class GpuBind { local, none };
inline GpuBind gpu_bind() {
  const std::string v = detail::text("ATTNSWEEP_GPU_BIND");
  if (v.empty() || v == "local") return GpuBind::local;
  if (v == "none") return GpuBind::none;
  throw std::runtime_error("environment variable ATTNSWEEP_GPU_BIND=" + v +
                           ": expected local (the default: share out the node's GPUs by local rank) or none");
}

// ATTNSWEEP_FAKE_GPU_COUNT=N: a rank with no GPU plans and names N GPU slots whose cells
// run on the CPU (tests of the GPU binding on CPU hosts); -1 when unset.
inline int fake_gpu_count() {
  return detail::whole_number("ATTNSWEEP_FAKE_GPU_COUNT", 0);
}

// ATTNSWEEP_NCCL_LIBRARY: the NCCL shared library to load first ("" when unset).
inline std::string nccl_library() {
  return detail::text("ATTNSWEEP_NCCL_LIBRARY");
}
// ATTNSWEEP_FASHION_MNIST_DIR: where the Fashion-MNIST files are ("" when unset: the
// default folder).
inline std::string fashion_mnist_dir() {
  return detail::text("ATTNSWEEP_FASHION_MNIST_DIR");
}

// Set by a parent for its child. ATTNSWEEP_ATTEMPT: the cell's attempt (1, 2, ...; none when
// unset), set by the slot for `attnsweep train` and by the command task for the
// researcher's program. ATTNSWEEP_CPU_ENV_SET: the process has re-executed itself with
// its start-up CPU settings (base/cpu_env.h), so it must not again.
inline constexpr const char* kAttempt = "ATTNSWEEP_ATTEMPT";
inline constexpr const char* kCpuEnvSet = "ATTNSWEEP_CPU_ENV_SET";
inline std::optional<int> attempt() {
  const char* v = detail::get(kAttempt);
  if (v == nullptr) return std::nullopt;
  return std::atoi(v);
}
inline bool cpu_env_set() {
  return detail::get(kCpuEnvSet) != nullptr;
}

// The benchmarks' own (bench/): ATTN_BENCH_SECONDS, the least time a measurement runs
// (default `fallback`); ATTNSWEEP_BENCH_WARMUP, steps before the clock starts;
// ATTNSWEEP_BENCH_BATCH, the batch to time (0: the program's own).
inline double bench_seconds(double fallback) {
  const char* v = detail::get("ATTN_BENCH_SECONDS");
  return v != nullptr ? std::atof(v) : fallback;
}
inline int bench_warmup(int fallback) {
  const char* v = detail::get("ATTNSWEEP_BENCH_WARMUP");
  return v != nullptr ? std::atoi(v) : fallback;
}
inline int bench_batch() {
  const char* v = detail::get("ATTNSWEEP_BENCH_BATCH");
  return v != nullptr ? std::max(0, std::atoi(v)) : 0;
}

// ---- what others set ---------------------------------------------------------------------

// The name of a variable that the launcher, the scheduler or the OS sets. A literal that
// starts with ATTNSWEEP_ does not compile: attnsweep's own have their accessors above.
// (nvcc compiles the CUDA sources as C++17, where the check is left out: none of them
// names a launcher's variable.)
struct ForeignName {
  const char* name;
#if __cplusplus >= 202002L
  consteval ForeignName(const char* n) : name(n) {  // NOLINT: implicit from a literal, by design
    if (std::string_view(n).starts_with("ATTNSWEEP_"))
      throw "an ATTNSWEEP_* variable is a toggle: give it an accessor in base/options.h";
  }
#else
  constexpr ForeignName(const char* n) : name(n) {}  // NOLINT: implicit from a literal, by design
#endif
};
// Its value, or nullptr when unset.
inline const char* launcher_env(ForeignName v) {
  return detail::get(v.name);
}
// Its value as a whole number >= lo, -1 when unset (an error otherwise, as whole_number).
inline int launcher_env_int(ForeignName v, int lo) {
  return detail::whole_number(v.name, lo);
}

}  // namespace attnsweep::options
