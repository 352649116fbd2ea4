// Force-included (-include) before every CUDA source (.cu, .cuh) of the emulated build
// (cmake -DATTNSWEEP_CUDA=EMULATE): makes CUDA C++ host C++. The execution-space
// keywords vanish, __shared__ becomes a static in a section of its own (poisoned at each
// launch, so a read of what the block never wrote is NaN), threadIdx & co. read the
// running lane, and the device intrinsics the kernels use are defined here as the ISA
// defines them. Kernels change only at the seams kernels/cuda/device.cuh (launches,
// dynamic shared memory) and kernels/cuda/ptx.cuh (inline PTX, whose twin is ptx.h).
#pragma once

#define ATTNSWEEP_CUDA_EMULATED 1
#define __shared__ __attribute__((section("attnsweep_emu_shared"))) static
// __launch_bounds__(max threads[, min blocks]): the kernel begins with as many one-byte
// nops as its bound (GCC's patchable_function_entry; sizeof folds a constexpr name, which
// the attribute needs), and the launch counts them (emulator/runtime.cpp, launch_bound).
#define ATTNSWEEP_EMU_FIRST(a, ...) a
#define __launch_bounds__(...) \
  __attribute__((patchable_function_entry(sizeof(char[ATTNSWEEP_EMU_FIRST(__VA_ARGS__, 0)]))))

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <source_location>
#include <tuple>
#include <type_traits>
#include <utility>

#include "emulator/emu.h"

// The linker's bounds of this binary's static __shared__ variables.
extern "C" char __start_attnsweep_emu_shared[] __attribute__((weak));
extern "C" char __stop_attnsweep_emu_shared[] __attribute__((weak));
// The executable's zero-initialised data, where GCC puts a template's static __shared__
// variables (each in a comdat section of its own: the section attribute does not hold).
extern "C" char __bss_start[] __attribute__((weak));
extern "C" char _end[] __attribute__((weak));

#define threadIdx (::attnsweep::emu::t_lane->thread_idx)
#define blockIdx (::attnsweep::emu::t_lane->block_idx)
#define blockDim (::attnsweep::emu::t_lane->block_dim)
#define gridDim (::attnsweep::emu::t_lane->grid_dim)

inline void __syncthreads(std::source_location loc = std::source_location::current()) {
  ::attnsweep::emu::syncthreads(loc);
}

template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                         std::source_location loc = std::source_location::current()) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  if (width < 1 || width > 32 || (width & (width - 1)))
    ::attnsweep::emu::device_error("__shfl_xor_sync with a width that is not a power of 2 up to 32", loc);
  T out{};
  ::attnsweep::emu::warp_collective(
      ::attnsweep::emu::WarpOp::shfl_xor, mask,
      (static_cast<uint32_t>(lane_mask) & 31u) | (uint32_t{sizeof(T)} << 8) | (static_cast<uint32_t>(width) << 16), &v,
      &out, loc);
  return out;
}

// ---- the fast-math and rounding intrinsics (PTX ISA; CUDA math API) -------------------

// __expf(x) = ex2.approx(x * log2(e)), the product rounded to float (FMUL then MUFU.EX2).
inline float __expf(float x) {
  const float t = x * 1.4426950408889634f;
  return ::attnsweep::emu::ex2_approx_ftz(t);
}
// The _rn arithmetic is never contracted into an FMA (the CUDA sources are compiled with
// -ffp-contract=fast, as nvcc contracts by default): the result passes through an empty
// asm that g++ cannot see into, so it is rounded before any later add.
namespace attnsweep::emu {
inline float rounded(float x) {
  asm("" : "+x"(x));
  return x;
}
}  // namespace attnsweep::emu
inline float __fadd_rn(float a, float b) {
  return ::attnsweep::emu::rounded(a + b);
}
inline float __fsub_rn(float a, float b) {
  return ::attnsweep::emu::rounded(a - b);
}
inline float __fmul_rn(float a, float b) {
  return ::attnsweep::emu::rounded(a * b);
}
inline float __fsqrt_rn(float a) {
  return std::sqrt(a);
}
inline float __int2float_rn(int x) {
  return static_cast<float>(x);
}
inline float __uint_as_float(unsigned x) {
  return std::bit_cast<float>(x);
}
inline unsigned __float_as_uint(float x) {
  return std::bit_cast<unsigned>(x);
}
inline float __int_as_float(int x) {
  return std::bit_cast<float>(x);
}
inline int __float_as_int(float x) {
  return std::bit_cast<int>(x);
}

// cuda_runtime.h's template overload, which it declares for nvcc only.
template <class... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attr, value);
}

namespace attnsweep::emu {
// kernel<<<grid, block, smem, stream>>>(args): the arguments are converted to the
// kernel's parameter types and copied at the launch, as CUDA does.
template <class... P>
struct Launcher {
  void (*fn)(P...);
  LaunchSite site;
  dim3 grid, block;
  size_t smem;
  cudaStream_t stream;
  template <class... A>
  void operator()(A&&... a) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> args(std::forward<A>(a)...);
    PointerArgs pointers;
    int index = 0;
    std::apply([&](const auto&... x) { (note_pointer(pointers, index++, x), ...); }, args);
    auto f = fn;
    (void)launch(
        site, grid, block, smem, stream,
        [f, args]() {
#ifdef __SANITIZE_ADDRESS__
          // No hostcheck under ASan (no instrumentation to call it), so no copy on the fiber's
          // stack either: ASan saw stale redzones there (a stack-buffer-underflow at its first
          // CI run, 2026-12-07).
          std::apply(f, args);
#else
          auto own = args;  // each thread's copy, on its own stack
          kernel_body_starts();
          std::apply(f, own);
#endif
        },
        std::move(pointers));
  }
  template <class T>
  static void note_pointer(PointerArgs& out, int index, const T& x) {
    if constexpr (std::is_pointer_v<T> && !std::is_function_v<std::remove_pointer_t<T>>)
      out.emplace_back(index, static_cast<const void*>(x));
  }
};
template <class... P>
Launcher<P...> make_launcher(void (*fn)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                             const char* name, const char* file, int line) {
  return Launcher<P...>{fn,
                        LaunchSite{reinterpret_cast<const void*>(fn), name, file, line, __start_attnsweep_emu_shared,
                                   __stop_attnsweep_emu_shared, __bss_start, _end},
                        grid,
                        block,
                        smem,
                        stream};
}
}  // namespace attnsweep::emu
