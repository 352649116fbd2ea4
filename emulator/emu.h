// The emulated CUDA device's interface between the kernels' side (emulator/cuda_emu.h,
// force-included into every CUDA source of the emulated build) and its runtime
// (block.cpp: a block's threads as fibers; runtime.cpp: memory, streams, events, graphs).
// docs/cuda-emulator.md says what it models and what it cannot tell.
#pragma once

#include <cuda_runtime_api.h>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

namespace attnsweep::emu {

// One emulated GPU thread (a lane): what threadIdx, blockIdx, blockDim and gridDim read.
struct Lane {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  int linear = 0;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};

// The lane running on this host thread (set by the block scheduler at every switch).
// Initial-exec TLS: the emulator is linked at start-up, never dlopen'ed, and kernels read
// it at every threadIdx.
extern thread_local Lane* t_lane __attribute__((tls_model("initial-exec")));

// ---- block and warp collectives (block.cpp) --------------------------------------------
// __syncthreads: every live thread of the block at the same barrier, or an error naming
// the kernel and both lines (synccheck).
void syncthreads(std::source_location loc);

// The warp collectives: every lane of the warp arrives with its operand; the last
// arrival computes every lane's result from the ISA's lane maps; a lane missing
// (exited, at a block barrier or at another collective) is an error, never a hang.
enum class WarpOp : int { shfl_xor, ldmatrix_x4, ldmatrix_x4_trans, mma_bf16, mma_f16 };
void warp_collective(WarpOp op, uint32_t mask, uint32_t arg, const void* in, void* out, std::source_location loc);

// The running block's dynamic shared memory (exactly the launch's size: a read past it is
// a heap overflow under ASan); nullptr when the launch asked for none.
void* dynamic_shared();

// cp.async (16 bytes, src_bytes <= 16 read, the rest zero-filled): the destination is
// poisoned (0xff bytes: NaN) at issue and written at the wait_group that covers it.
void cp_async16(void* dst, const void* src, int src_bytes, std::source_location loc);
void cp_async_commit();
void cp_async_wait(int pending_allowed, std::source_location loc);

// An error inside a kernel (a bad address or operand): ends the launch with
// cudaErrorLaunchFailure and this message.
[[noreturn]] void device_error(const std::string& what, std::source_location loc);

// ---- memcheck (memcheck.cpp) -----------------------------------------------------------
// Memory that ends at a guard page: device allocations and each block's dynamic shared
// memory. The pointer is 16-byte aligned and at most 15 bytes (poisoned) lie between the
// last byte asked for and the guard, so a kernel reading one element past the end of a
// buffer whose size is a multiple of 16 bytes faults there, and the fault becomes the
// launch's error naming the kernel, the block, the thread and the allocation. Under ASan
// the memory is ordinary heap memory of exactly `bytes` (ASan reports the overflow).
// The bytes before the start hold a canary, and a guard page lies before them: a write
// there is reported (what writes_before_allocations and guarded_free return).
void* guarded_alloc(size_t bytes, const char* what);
// Frees it; "" or what wrote before its start.
std::string guarded_free(void* p);
// The first allocation whose last 64 bytes before its start were written (checked after
// every launch), "memcheck: a write at byte -k of ...", or "".
std::string writes_before_allocations();
// The kernel thread running on this host thread ("thread T (warp W)"), or "" outside a
// kernel (the launch's error names the kernel and the block).
std::string running_thread();
// Ends the running kernel thread's block with `what` (from the fault handler: an access
// the hardware would report as an illegal address).
[[noreturn]] void kernel_fault(const std::string& what);

// ---- sharedcheck (block.cpp, sharedcheck.cpp) ----------------------------------------
// Racecheck and initcheck of plain shared-memory loads and stores. The CUDA sources of
// the emulated build are compiled with GCC's ThreadSanitizer instrumentation
// (-fsanitize=thread at compile time only): every load and store calls an entry point
// that sharedcheck.cpp defines (no ThreadSanitizer runtime is linked). While a block
// runs, an access inside one of these spans goes to shared_access (block.cpp says what
// it checks); any other access returns at once.
struct SharedSpan {
  uintptr_t begin = 0;
  uintptr_t size = 0;  // 0: none
};
// Static __shared__, the executable's zero-initialised data (a template's static
// __shared__), the launch's dynamic shared memory; all empty outside a launch.
extern thread_local SharedSpan t_shared_spans[3] __attribute__((tls_model("initial-exec")));
// A load (write false) or store of `bytes` at `p` by the running kernel thread, made by
// the instruction before `pc`: a hazard ends the block with a racecheck or initcheck error.
void shared_access(const void* p, size_t bytes, bool write, const void* pc);
// Set while a watched block runs: every other access of it goes to host_access
// (block.cpp), which ends the block when the address is host memory the device cannot
// reach (the hostcheck).
extern thread_local bool t_watched __attribute__((tls_model("initial-exec")));
void host_access(const void* p, size_t bytes, bool write, const void* pc);
// Called by each kernel thread once its arguments are copied (cuda_emu.h's launcher):
// from here on its accesses are the kernel's own.
void kernel_body_starts();
// For the hostcheck (runtime.cpp): "" where [p, p + n) lies in a device allocation or in
// pinned host memory (*span: that allocation), else what the address is.
std::string device_reachable(const void* p, size_t n, SharedSpan* span);
// Whether the kernels were compiled with the instrumentation (their modules' constructors
// say so) and ATTNSWEEP_EMU_SHAREDCHECK is not 0.
bool sharedcheck_on();
// ATTNSWEEP_EMU_SHAREDCHECK=all: every launch and block is watched. By default, the first
// launch of each of a kernel's first 4 grid shapes in the process, and in it the first two
// blocks, the last of the first row and the last: a race is in the code every block runs,
// or in a partial tile at an edge, and a watched block runs several times slower.
bool sharedcheck_every_block();
// Turns it on or off from now (the emulator's own tests of what a kernel reads without it).
void set_sharedcheck(bool on);
// "file:line" of the instruction before `pc` (addr2line over the binary's line table), or
// the binary and the offset where it has none.
std::string code_line(const void* pc);
// The function of that instruction, demangled (the innermost inlined one), or "".
std::string code_function(const void* pc);

// ---- numerics (numerics.cpp) -----------------------------------------------------------
// ATTNSWEEP_EMULATED_NUMERICS: exact (default) or hardware (numerics.cpp says what each is).
enum class Numerics { exact, hardware };
namespace detail {
extern const Numerics g_numerics;  // numerics.cpp reads the variable once, at load
}
inline Numerics numerics() {
  return detail::g_numerics;
}
// x moved by -ulps ... +ulps ulp, a fixed function of `seed`: an approximate instruction's
// result within its documented bound.
float perturbed(float x, uint32_t seed, int ulps);
// The tensor-core mma's c + sum over k < 16 of a[k] b[k] (a, b: bf16 or f16 values).
float mma_dot16(const float* a, const float* b, float c, Numerics mode = numerics());

// ex2.approx.ftz.f32: 2^x, subnormal inputs and results flushed to zero, ex2(-inf) = +0.
// The hardware's result is within 2 ulp of 2^x (exact at integers): correctly rounded in
// the exact numerics, moved by up to 2 ulp in the hardware-like ones.
inline float flush_subnormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
inline float ex2_approx_ftz(float x, Numerics mode = numerics()) {
  x = flush_subnormal(x);
  float r = flush_subnormal(std::exp2(x));
  if (mode == Numerics::hardware && x != std::nearbyint(x))
    r = flush_subnormal(perturbed(r, std::bit_cast<uint32_t>(x), 2));
  return r;
}

// ---- launches (runtime.cpp) ------------------------------------------------------------
struct LaunchSite {
  const void* func;  // the kernel, as cudaFuncSetAttribute names it
  const char* name;  // its expression at the launch site
  const char* file;
  int line;
  char* shared_begin;  // this binary's static __shared__ section, poisoned at each launch
  char* shared_end;
  char* bss_begin;  // its zero-initialised data (a template's static __shared__ lies there)
  char* bss_end;
};
// A kernel's pointer parameters (index, value), checked when it runs: each null or in
// memory the device reaches (a device allocation, pinned host memory).
using PointerArgs = std::vector<std::pair<int, const void*>>;
// Checks the configuration (an error is what cudaGetLastError returns next), then
// enqueues every block of the grid on `stream`; `thread` runs the kernel body for t_lane.
cudaError_t launch(const LaunchSite& site, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream,
                   std::function<void()> thread, PointerArgs pointers = {});

// Runs one grid now (block.cpp; the runtime calls it when the launch's turn comes).
// Returns "" or what went wrong, naming the kernel and the line.
// "kernel_expression (launched at dir/file.cu:line)", as every report names a kernel.
std::string kernel_name(const LaunchSite& site);
std::string run_grid(const LaunchSite& site, dim3 grid, dim3 block, size_t dynamic_smem,
                     const std::function<void()>& thread);

// Work queued on a stream runs after the stream's earlier work and after every token in
// `wait_for` is done (a token is done when its producer sets it, in its own work).
struct Token {
  bool done = false;
};
using TokenP = std::shared_ptr<Token>;
// Queues `work` on `stream` like a kernel (cuBLAS and NCCL use it). `what` names it in errors.
cudaError_t enqueue(cudaStream_t stream, const char* what, std::function<void()> work,
                    std::vector<TokenP> wait_for = {});
// Whether the stream is capturing a graph (work that cannot be captured refuses it).
bool is_capturing(cudaStream_t stream);

// Device memory: true when [p, p + bytes) lies in one live cudaMalloc'd allocation.
bool is_device_range(const void* p, size_t bytes);

// The number of emulated devices (ATTNSWEEP_EMULATED_GPUS, default 1).
int device_count();

}  // namespace attnsweep::emu
