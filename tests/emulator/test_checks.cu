// What only the emulated device checks (docs/cuda-emulator.md): each test makes one
// mistake a kernel or its host code could make and expects the emulator's report, the
// same message a user would read. Emulated build only (ctest emulator.checks).
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/ptx.cuh"
#include "kernels/scratch.h"

extern "C" {
int ncclCommInitAll(void** comms, int ndev, const int* devlist);
int ncclCommDestroy(void* comm);
int ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op, void* comm, cudaStream_t stream);
int ncclGroupStart();
int ncclGroupEnd();
}

namespace {

// The fault's message after a synchronising call, and the device reset for the next test.
std::string fault_after_sync() {
  const cudaError_t e = cudaDeviceSynchronize();
  std::string msg = e == cudaSuccess ? "" : cudaGetErrorString(e);
  cudaDeviceReset();
  return msg;
}

float* device_floats(size_t n) {
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)), cudaSuccess);
  return p;
}

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> v(n);
  EXPECT_EQ(cudaMemcpy(v.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// Reads what a kernel sees without the sharedcheck (its poison and its warp order), which
// would otherwise end these launches first.
struct WithoutSharedcheck {
  WithoutSharedcheck() { attnsweep::emu::set_sharedcheck(false); }
  ~WithoutSharedcheck() { attnsweep::emu::set_sharedcheck(true); }
};

// ---- synccheck ----------------------------------------------------------------------------
__global__ void divergent_barrier_kernel() {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
}
__global__ void exit_before_barrier_kernel() {
  if (threadIdx.x == 0) return;
  __syncthreads();
}
__global__ void lane_missing_kernel(float* out) {
  float v = 1.0f;
  if (threadIdx.x != 3) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

TEST(EmulatorChecks, ThreadsAtDifferentBarriersAreReported) {
  ATTN_LAUNCH(1, 64, 0, nullptr, divergent_barrier_kernel)();
  const std::string m = fault_after_sync();
  EXPECT_NE(m.find("divergent_barrier_kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("threads at different barriers"), std::string::npos) << m;
  EXPECT_NE(m.find("test_checks.cu:"), std::string::npos) << m;
}

TEST(EmulatorChecks, AThreadExitingWhileOthersWaitIsReported) {
  ATTN_LAUNCH(1, 64, 0, nullptr, exit_before_barrier_kernel)();
  const std::string m = fault_after_sync();
  EXPECT_NE(m.find("a thread exited while others wait at a barrier"), std::string::npos) << m;
}

TEST(EmulatorChecks, ALaneMissingAtAShuffleIsAnErrorNotAHang) {
  float* out = device_floats(32);
  ATTN_LAUNCH(1, 32, 0, nullptr, lane_missing_kernel)(out);
  const std::string m = fault_after_sync();
  EXPECT_NE(m.find("a lane is missing at a warp collective"), std::string::npos) << m;
  EXPECT_NE(m.find("thread 3"), std::string::npos) << m;
  cudaFree(out);
}

// ---- racecheck by poison: a read of shared memory no thread wrote yet ----------------------
// Static __shared__ of a kernel that is not a template (GCC places a template's statics
// outside the poisoned section: docs/cuda-emulator.md), and dynamic shared memory.
__global__ void publish_synced_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];  // the neighbour's value
}
__global__ void publish_unsynced_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];  // no barrier: a race
}
__global__ void publish_unsynced_dynamic_kernel(float* out) {
  ATTN_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
}

TEST(EmulatorChecks, AMissingSyncthreadsReadsPoison) {
  WithoutSharedcheck off;
  float* out = device_floats(64);
  ATTN_LAUNCH(1, 64, 0, nullptr, publish_synced_kernel)(out);
  std::vector<float> r = to_host(out, 64);
  for (int t = 0; t < 64; ++t) EXPECT_EQ(r[static_cast<size_t>(t)], static_cast<float>((t + 1) % 64));
  ATTN_LAUNCH(1, 64, 0, nullptr, publish_unsynced_kernel)(out);
  r = to_host(out, 64);
  EXPECT_TRUE(std::isnan(r[0])) << "thread 0 ran before thread 1 wrote: it must see the poison, saw " << r[0];
  ATTN_LAUNCH(1, 64, 64 * sizeof(float), nullptr, publish_unsynced_dynamic_kernel)(out);
  r = to_host(out, 64);
  EXPECT_TRUE(std::isnan(r[0])) << "dynamic shared memory: saw " << r[0];
  cudaFree(out);
}

// ---- warps run ahead: a missing barrier shows between warps, in both directions ----------
__global__ void publish_across_warps_kernel(float* out) {
  ATTN_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  out[blockIdx.x * 64 + threadIdx.x] = s[63 - threadIdx.x];  // the other warp's value, no barrier
}

TEST(EmulatorChecks, AWarpRunsAheadOfTheOthersUpToABarrier) {
  WithoutSharedcheck off;
  float* out = device_floats(128);
  ATTN_LAUNCH(2, 64, 64 * sizeof(float), nullptr, publish_across_warps_kernel)(out);
  const std::vector<float> r = to_host(out, 128);
  for (int t = 0; t < 64; ++t) {
    // Block 0 runs warp 0 first, block 1 warp 1 first: the first warp reads poison.
    const bool block0_first = t < 32;
    EXPECT_EQ(std::isnan(r[static_cast<size_t>(t)]), block0_first) << "block 0, thread " << t;
    EXPECT_EQ(std::isnan(r[static_cast<size_t>(64 + t)]), !block0_first) << "block 1, thread " << t;
    if (!block0_first) {
      EXPECT_EQ(r[static_cast<size_t>(t)], static_cast<float>(63 - t));
    }
  }
  cudaFree(out);
}

// ---- sharedcheck: every plain load and store of shared memory ---------------------------
// Equal values: the second phase writes what the first wrote, so the result is right in
// any order, and only the shadow of each byte shows that thread t reads its neighbour's
// element while the neighbour writes it (write after read).
__global__ void equal_value_race_kernel(float* out) {
  __shared__ float s[64];
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % 64];
  s[threadIdx.x] = 1.0f;  // no barrier since the neighbour's read
}
// Within a warp: lane t reads lane t^1's element, ordered by a warp collective or not.
template <bool kCollective>
__global__ void warp_publish_kernel(float* out) {
  __shared__ float s[32];  // a template's static __shared__ (not in the poisoned section)
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  float v = 0.0f;
  if (kCollective) v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = s[threadIdx.x ^ 1u] + v;
}
__global__ void unwritten_template_shared_kernel(float* out) {
  __shared__ float s[8];
  out[threadIdx.x] = s[threadIdx.x];
}

std::string launch_error(void (*kernel)(float*), int threads) {
  float* out = device_floats(64);
  ATTN_LAUNCH(1, threads, 0, nullptr, kernel)(out);
  std::string m = fault_after_sync();
  return m;
}

TEST(EmulatorChecks, SharedcheckReportsRacesOfEqualValuesNamingBothLines) {
  {
    WithoutSharedcheck off;  // what the emulator saw before: nothing
    EXPECT_EQ(launch_error(equal_value_race_kernel, 64), "");
  }
  const std::string m = launch_error(equal_value_race_kernel, 64);
  EXPECT_NE(m.find("racecheck: thread 1 (warp 0) writes 4 bytes of static __shared__ memory at "
                   "emulator/test_checks.cu:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("which thread 0 (warp 0) read at emulator/test_checks.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("(write after read)"), std::string::npos) << m;
}

TEST(EmulatorChecks, SharedcheckOrdersTheLanesOfAWarpByItsCollectivesOnly) {
  EXPECT_EQ(launch_error(warp_publish_kernel<true>, 32), "");
  // Lane 0 runs first and reads lane 1's element before lane 1 ran: never written yet.
  std::string m = launch_error(warp_publish_kernel<false>, 32);
  EXPECT_NE(m.find("initcheck: thread 0 (warp 0) reads 4 bytes of static __shared__ memory at "
                   "emulator/test_checks.cu:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("which no thread of this block has written"), std::string::npos) << m;
}

TEST(EmulatorChecks, SharedcheckReportsAReadOfSharedMemoryNeverWrittenInATemplate) {
  {
    WithoutSharedcheck off;  // a template's static __shared__ is not poisoned: it reads 0
    EXPECT_EQ(launch_error(unwritten_template_shared_kernel, 8), "");
  }
  const std::string m = launch_error(unwritten_template_shared_kernel, 8);
  EXPECT_NE(m.find("initcheck: thread 0 (warp 0) reads 4 bytes"), std::string::npos) << m;
}

// ---- racecheck: cp.async writes and ldmatrix reads of shared memory ------------------------
// Warp `Copier` copies a 32 x 8 bf16 tile in by cp.async, the other warp reads it by
// ldmatrix.x4.
template <bool Barrier, int Copier>
__global__ void copy_then_ldmatrix_kernel(const uint16_t* src, uint32_t* out) {
  ATTN_DYNAMIC_SHARED(uint16_t, tile);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == Copier) {
    attnsweep::cuda::mma::cp_async16(tile + lane * 8, src + lane * 8, 16);
    attnsweep::cuda::mma::cp_async_commit();
    attnsweep::cuda::mma::cp_async_wait<0>();
  }
  if (Barrier) __syncthreads();
  if (warp != Copier) {
    uint32_t r[4];
    attnsweep::cuda::mma::ldmatrix_x4(r, tile + lane * 8);
    for (int i = 0; i < 4; ++i) out[lane * 4 + i] = r[i];
  }
}

// The message of one launch of `kernel` (64 threads, one block), "" when it succeeded.
template <class Kernel>
std::string tile_launch(Kernel kernel, std::vector<uint32_t>* result = nullptr) {
  uint16_t* src = nullptr;
  uint32_t* out = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&src), 256 * sizeof(uint16_t)), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&out), 128 * sizeof(uint32_t)), cudaSuccess);
  std::vector<uint16_t> h(256);
  for (int i = 0; i < 256; ++i) h[static_cast<size_t>(i)] = static_cast<uint16_t>(i);
  EXPECT_EQ(cudaMemcpy(src, h.data(), sizeof(uint16_t) * h.size(), cudaMemcpyHostToDevice), cudaSuccess);
  ATTN_LAUNCH(1, 64, 512, nullptr, kernel)(src, out);
  if (cudaDeviceSynchronize() != cudaSuccess) return fault_after_sync();
  if (result) {
    result->resize(128);
    EXPECT_EQ(cudaMemcpy(result->data(), out, 512, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  cudaFree(src);
  cudaFree(out);
  return "";
}

TEST(EmulatorChecks, RacecheckReportsSharedMemoryHazardsBetweenWarps) {
  std::vector<uint32_t> r;
  EXPECT_EQ(tile_launch(copy_then_ldmatrix_kernel<true, 1>, &r), "");
  // Lane 0's register 0: matrix 0 (rows 0-7), row 0, columns 0 and 1.
  EXPECT_EQ(r.at(0), 0u | 1u << 16);
  EXPECT_EQ(tile_launch(copy_then_ldmatrix_kernel<true, 0>), "");
  // Warp 0 runs first: it copies, warp 1 reads what it wrote (read after write).
  std::string m = tile_launch(copy_then_ldmatrix_kernel<false, 0>);
  EXPECT_NE(m.find("racecheck: ldmatrix at emulator/test_checks.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("(warp 1) reads 16 bytes of shared memory that thread 0 (warp 0) wrote by cp.async at "
                   "emulator/test_checks.cu:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("read after write"), std::string::npos) << m;
  // Warp 0 reads first, then warp 1's cp.async overwrites it (write after read).
  m = tile_launch(copy_then_ldmatrix_kernel<false, 1>);
  EXPECT_NE(m.find("racecheck: cp.async at emulator/test_checks.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("that warp 0 read by ldmatrix at emulator/test_checks.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("write after read"), std::string::npos) << m;
}

// ---- cp.async: the destination is poisoned until its wait_group ---------------------------
__global__ void cp_async_early_read_kernel(const float* src, float* out) {
  __shared__ __align__(16) float buf[32 * 4];
  attnsweep::cuda::mma::cp_async16(&buf[threadIdx.x * 4], src + threadIdx.x * 4, 16);
  attnsweep::cuda::mma::cp_async_commit();
  out[threadIdx.x] = buf[threadIdx.x * 4];  // before the wait
  attnsweep::cuda::mma::cp_async_wait<0>();
  out[32 + threadIdx.x] = buf[threadIdx.x * 4];
}

TEST(EmulatorChecks, ACpAsyncDestinationReadBeforeItsWaitIsPoison) {
  WithoutSharedcheck off;
  float* src = device_floats(128);
  float* out = device_floats(64);
  std::vector<float> h(128, 3.0f);
  ASSERT_EQ(cudaMemcpy(src, h.data(), 128 * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ATTN_LAUNCH(1, 32, 0, nullptr, cp_async_early_read_kernel)(src, out);
  const std::vector<float> r = to_host(out, 64);
  for (int t = 0; t < 32; ++t) {
    EXPECT_TRUE(std::isnan(r[static_cast<size_t>(t)])) << t;
    EXPECT_EQ(r[static_cast<size_t>(32 + t)], 3.0f) << t;
  }
  cudaFree(src);
  cudaFree(out);
}

TEST(EmulatorChecks, SharedcheckReportsAReadOfACpAsyncDestinationInFlight) {
  float* src = device_floats(128);
  float* out = device_floats(64);
  ATTN_LAUNCH(1, 32, 0, nullptr, cp_async_early_read_kernel)(src, out);
  const std::string m = fault_after_sync();
  EXPECT_NE(m.find("initcheck: thread 0 (warp 0) reads 4 bytes of static __shared__ memory at "
                   "emulator/test_checks.cu:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("which the cp.async of thread 0 (warp 0) at emulator/test_checks.cu:"), std::string::npos) << m;
  EXPECT_NE(m.find("has in flight (not waited for)"), std::string::npos) << m;
}

// ---- launches -------------------------------------------------------------------------------
__global__ void dyn_kernel(float* out) {
  ATTN_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

TEST(EmulatorChecks, DynamicSharedMemoryAboveItsLimitIsRefused) {
  float* out = device_floats(32);
  ATTN_LAUNCH(1, 32, 64 * 1024, nullptr, dyn_kernel)(out);
  const cudaError_t e = cudaGetLastError();
  EXPECT_EQ(e, cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(e)).find("cudaFuncAttributeMaxDynamicSharedMemorySize"), std::string::npos);
  ASSERT_EQ(cudaFuncSetAttribute(dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024), cudaSuccess);
  ATTN_LAUNCH(1, 32, 64 * 1024, nullptr, dyn_kernel)(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ATTN_LAUNCH(1, 2048, 0, nullptr, dyn_kernel)(out);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  cudaFree(out);
}

constexpr int kBound = 64;
template <int Scale>
__global__ void __launch_bounds__(kBound, 2) bounded_kernel(float* out) {
  out[threadIdx.x] = Scale * 1.0f;
}
__global__ void unbounded_kernel(float* out) {
  out[threadIdx.x] = 1.0f;
}

// As on a GPU: a kernel compiled for at most kBound threads a block does not launch with
// more (cudaErrorLaunchOutOfResources, "too many resources requested for launch").
TEST(EmulatorChecks, ALaunchAboveTheKernelsLaunchBoundsIsRefused) {
  float* out = device_floats(1024);
  ATTN_LAUNCH(1, kBound, 0, nullptr, bounded_kernel<2>)(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ATTN_LAUNCH(1, kBound + 1, 0, nullptr, bounded_kernel<2>)(out);
  const cudaError_t e = cudaGetLastError();
  EXPECT_EQ(e, cudaErrorLaunchOutOfResources);
  EXPECT_NE(std::string(cudaGetErrorString(e)).find("65 threads a block, above the kernel's __launch_bounds__ of 64"),
            std::string::npos)
      << cudaGetErrorString(e);
  // A kernel without bounds takes up to 1024.
  ATTN_LAUNCH(1, 1024, 0, nullptr, unbounded_kernel)(out);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
}

__global__ void static_and_dynamic_kernel(float* out, int static_floats) {
  __shared__ float table[12 * 1024];  // 48 KiB, the most nvcc allows
  ATTN_DYNAMIC_SHARED(float, dyn);
  for (int i = threadIdx.x; i < static_floats; i += blockDim.x) table[i] = 1.0f;
  dyn[threadIdx.x] = 2.0f;
  __syncthreads();
  out[threadIdx.x] = table[threadIdx.x] + dyn[threadIdx.x];
}

// sm_90 gives a block at most 232,448 bytes of shared memory, static and dynamic together:
// what the static part takes is counted as the bytes the block wrote (the sharedcheck).
TEST(EmulatorChecks, StaticAndDynamicSharedMemoryAreSummedAgainstTheLimit) {
  float* out = device_floats(256);
  const int dyn = 220 * 1024;
  ASSERT_EQ(cudaFuncSetAttribute(static_and_dynamic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn),
            cudaSuccess);
  ATTN_LAUNCH(1, 256, dyn, nullptr, static_and_dynamic_kernel)(out, 1024);  // 4 KiB + 220 KiB
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
  out = device_floats(256);
  ATTN_LAUNCH(2, 256, dyn, nullptr, static_and_dynamic_kernel)(out, 4096);  // 16 KiB + 220 KiB
  const std::string msg = fault_after_sync();
  EXPECT_NE(msg.find("the block wrote 16384 bytes of static __shared__ memory, and the launch gave it 225280 bytes "
                     "of dynamic shared memory: above sm_90's limits"),
            std::string::npos)
      << msg;
}

__global__ void read_first_kernel(const float* in, float* out, const float* unused) {
  if (threadIdx.x == 0 && in) out[0] = in[0] + (unused ? 1.0f : 0.0f);
}

// A kernel given a pointer to host memory (not pinned): a GPU faults at its first access
// through it; the emulated device at the kernel's start, naming the parameter.
TEST(EmulatorChecks, AKernelGivenAHostPointerFails) {
  float* out = device_floats(4);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&pinned), 4 * sizeof(float)), cudaSuccess);
  pinned[0] = 3.0f;
  ATTN_LAUNCH(1, 32, 0, nullptr, read_first_kernel)(pinned, out, out + 4);  // one past the end: a pointer into it
  ATTN_LAUNCH(1, 32, 0, nullptr, read_first_kernel)(nullptr, out, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(to_host(out, 1)[0], 4.0f);
  const std::vector<float> host(4, 1.0f);
  ATTN_LAUNCH(1, 32, 0, nullptr, read_first_kernel)(host.data(), out, nullptr);
  const std::string msg = fault_after_sync();
  EXPECT_NE(msg.find("read_first_kernel (launched at emulator/test_checks.cu:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("memcheck: its parameter 0 is 0x"), std::string::npos) << msg;
  EXPECT_NE(msg.find(", host memory (neither a device allocation nor pinned host memory)"), std::string::npos) << msg;
  cudaFreeHost(pinned);
}

struct ReadThrough {
  const float* in;
  float* out;
  __device__ void operator()(int i) const { out[i] = in[i]; }
};
template <class F>
__global__ void functor_kernel(F f, int first, int n) {
  if (static_cast<int>(threadIdx.x) < n) f(first + static_cast<int>(threadIdx.x));
}

// The hostcheck: in a watched block, a load or store that is not the block's own (its
// locals, shared memory, the binaries' data) must lie in a device allocation or pinned
// host memory, wherever the pointer came from (here a member of a functor, which the
// check of pointer parameters cannot see). Each launch has a grid shape of its own, so
// that each is watched.
TEST(EmulatorChecks, HostcheckReportsAKernelReachingHostMemoryOrPastItsBuffer) {
  float* in = device_floats(31);  // 124 bytes: 4 poisoned ones before the guard page
  float* out = device_floats(32);
  ATTN_LAUNCH(1, 32, 0, nullptr, functor_kernel<ReadThrough>)(ReadThrough{in, out}, 0, 31);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> host(32, 1.0f);
  ATTN_LAUNCH(1, 33, 0, nullptr, functor_kernel<ReadThrough>)(ReadThrough{host.data(), out}, 0, 32);
  std::string msg = fault_after_sync();
  EXPECT_NE(msg.find("hostcheck: thread 0 (warp 0) reads 4 bytes at emulator/test_checks.cu:"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(", host memory (neither a device allocation nor pinned host memory)"), std::string::npos) << msg;
  in = device_floats(31);
  out = device_floats(32);
  ATTN_LAUNCH(1, 34, 0, nullptr, functor_kernel<ReadThrough>)(ReadThrough{in, out}, 31, 1);  // in[31]
  msg = fault_after_sync();
  EXPECT_NE(msg.find("at byte 124 of a device allocation of 124 bytes, past its end"), std::string::npos) << msg;
}

// The pieces carved from one workspace (kernels/scratch.h's Carver) have a guard between
// them: in a watched block, a read one past a piece fails, though it lies in the same
// allocation. A launch keeps the layout it was queued with when the workspace is carved
// anew for another op before it runs.
// (A kernel is watched in its first 4 grid shapes: a functor of its own for each part.)
template <int Part>
struct ReadPiece {
  const float* in;
  float* out;
  __device__ void operator()(int i) const { out[i] = in[i]; }
};

TEST(EmulatorChecks, AKernelReachingPastACarvedPieceFailsInItsGuard) {
  char* ws = nullptr;
  float* out = device_floats(128);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&ws), 4096), cudaSuccess);
  attnsweep::Carver layout(ws);
  float* a = layout.take<float>(31);  // bytes 0..123; its guard 124..511
  float* b = layout.take<float>(32);  // bytes 512..639
  ATTN_LAUNCH(1, 35, 0, nullptr, functor_kernel<ReadPiece<1>>)(ReadPiece<1>{a, out}, 0, 31);
  ATTN_LAUNCH(1, 36, 0, nullptr, functor_kernel<ReadPiece<1>>)(ReadPiece<1>{b, out}, 0, 32);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ATTN_LAUNCH(1, 37, 0, nullptr, functor_kernel<ReadPiece<1>>)(ReadPiece<1>{a, out}, 31, 1);  // a[31]
  std::string msg = fault_after_sync();
  EXPECT_NE(msg.find("hostcheck: thread 0 (warp 0) reads 4 bytes at emulator/test_checks.cu:"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("at byte 0 of the 388-byte guard after a piece carved from a device allocation of 4096 bytes "
                     "(its byte 124; kernels/scratch.h's Carver), past the end of the piece"),
            std::string::npos)
      << msg;

  out = device_floats(128);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&ws), 4096), cudaSuccess);
  float* whole = attnsweep::Carver(ws).take<float>(128);  // bytes 0..511, no slack
  ATTN_LAUNCH(1, 128, 0, nullptr, functor_kernel<ReadPiece<2>>)(ReadPiece<2>{whole, out}, 0, 128);
  float* small = attnsweep::Carver(ws).take<float>(8);  // queued after: bytes 32..511 are now a guard
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "the launch read its piece of the layout it was queued with";
  ATTN_LAUNCH(1, 38, 0, nullptr, functor_kernel<ReadPiece<2>>)(ReadPiece<2>{small, out}, 8, 1);  // small[8]
  msg = fault_after_sync();
  EXPECT_NE(msg.find("at byte 0 of the 480-byte guard after a piece carved from"), std::string::npos) << msg;
}

// ---- streams: a forgotten event wait shows -------------------------------------------------
__global__ void fill_kernel(float* p, float v, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) p[i] = v;
}
__global__ void copy_kernel(const float* a, float* b, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) b[i] = a[i];
}

TEST(EmulatorChecks, AForgottenEventWaitReadsWhatWasNotWrittenYet) {
  cudaStream_t producer, consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  cudaEvent_t ready;
  ASSERT_EQ(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), cudaSuccess);
  float* a = device_floats(256);
  float* b = device_floats(256);
  for (const bool wait : {true, false}) {
    ATTN_LAUNCH(1, 64, 0, producer, fill_kernel)(a, wait ? 1.0f : 2.0f, 256);
    ASSERT_EQ(cudaEventRecord(ready, producer), cudaSuccess);
    if (wait) {
      ASSERT_EQ(cudaStreamWaitEvent(consumer, ready, 0), cudaSuccess);
    }
    ATTN_LAUNCH(1, 64, 0, consumer, copy_kernel)(a, b, 256);
    ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
    std::vector<float> h(256);
    ASSERT_EQ(cudaMemcpyAsync(h.data(), b, 256 * sizeof(float), cudaMemcpyDeviceToHost, consumer), cudaSuccess);
    if (wait) {
      EXPECT_EQ(h[0], 1.0f);
    } else {
      EXPECT_EQ(h[0], 1.0f) << "without the wait the consumer ran first and copied the old values";
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // The legacy stream does not wait for a non-blocking stream either.
  ATTN_LAUNCH(1, 64, 0, producer, fill_kernel)(a, 5.0f, 256);
  std::vector<float> h(256);
  ASSERT_EQ(cudaMemcpy(h.data(), a, 256 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 2.0f) << "cudaMemcpy on the legacy stream ran before the non-blocking stream's fill";
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(a);
  cudaFree(b);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

// ---- memory -------------------------------------------------------------------------------
TEST(EmulatorChecks, CopiesAreCheckedAgainstTheirAllocations) {
  float* d = device_floats(16);
  std::vector<float> h(32, 1.0f);
  EXPECT_EQ(cudaMemcpy(d, h.data(), 32 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "32 floats into an allocation of 16";
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorInvalidValue)).find("past the end"), std::string::npos);
  EXPECT_EQ(cudaMemcpy(h.data(), d, 16 * sizeof(float), cudaMemcpyHostToDevice), cudaErrorInvalidValue)
      << "the kind says host to device, the pointers say device to host";
  EXPECT_EQ(cudaMemcpy(h.data(), d, 16 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0])) << "fresh device memory is poisoned (NaN)";
  EXPECT_EQ(cudaFree(h.data()), cudaErrorInvalidValue);
  cudaFree(d);
}

// ---- memcheck: device memory and dynamic shared memory end at a guard page ----------------
__global__ void read_one_past_kernel(const float* in, float* out, int n) {
  for (int i = threadIdx.x; i <= n; i += blockDim.x) out[0] += in[i];  // i == n: one past the end
}
__global__ void shared_one_past_kernel(float* out, int n) {
  ATTN_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = 1.0f;
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x + 1];  // thread n - 1 reads s[n]
  (void)n;
}

__global__ void write_one_before_kernel(float* out, int n) {
  for (int i = static_cast<int>(threadIdx.x) - 1; i < n; i += blockDim.x) out[i] = 1.0f;  // i == -1: one before
}
__global__ void read_far_before_kernel(const float* in, float* out) {
  out[threadIdx.x] = in[static_cast<int>(threadIdx.x) - 1500];  // 6000 bytes before: past the canary, in the guard
}

#if defined(__SANITIZE_ADDRESS__)
TEST(EmulatorChecks, AKernelReadingOnePastItsBufferIsReportedUnderAsan) {
  float* in = device_floats(100);
  float* out = device_floats(1);
  EXPECT_DEATH(
      {
        ATTN_LAUNCH(1, 32, 0, nullptr, read_one_past_kernel)(in, out, 100);
        cudaDeviceSynchronize();
      },
      "heap-buffer-overflow");
  cudaFree(in);
  cudaFree(out);
}
#elif !defined(__SANITIZE_THREAD__)
TEST(EmulatorChecks, AKernelReadingOnePastItsBufferFailsItsLaunch) {
  float* in = device_floats(100);
  float* out = device_floats(64);
  ATTN_LAUNCH(1, 32, 0, nullptr, read_one_past_kernel)(in, out, 100);
  std::string m = fault_after_sync();
  EXPECT_NE(m.find("read_one_past_kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("memcheck: an access at byte 400 of a device allocation of 400 bytes, past its end"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("by thread 4 (warp 0)"), std::string::npos) << m;  // 4 + 3 * 32 = 100
  // Dynamic shared memory: exactly the launch's bytes.
  out = device_floats(64);
  ATTN_LAUNCH(1, 64, 64 * sizeof(float), nullptr, shared_one_past_kernel)(out, 64);
  m = fault_after_sync();
  EXPECT_NE(m.find("at byte 256 of the launch's dynamic shared memory of 256 bytes, past its end"), std::string::npos)
      << m;
  EXPECT_NE(m.find("by thread 63 (warp 1)"), std::string::npos) << m;
  // Reading within the buffer is fine, and the device works again after the reset.
  out = device_floats(64);
  ATTN_LAUNCH(1, 64, 65 * sizeof(float), nullptr, shared_one_past_kernel)(out, 64);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cudaFree(out);
}

// Before the start: a write into the bytes just before an allocation (a canary) fails the
// launch that made it; an access further before it hits the guard page in front.
TEST(EmulatorChecks, AKernelWritingBeforeItsBufferFailsItsLaunch) {
  float* out = device_floats(100);
  ATTN_LAUNCH(1, 32, 0, nullptr, write_one_before_kernel)(out, 100);
  std::string m = fault_after_sync();
  EXPECT_NE(m.find("write_one_before_kernel"), std::string::npos) << m;
  EXPECT_NE(m.find("memcheck: a write at byte -4 of a device allocation of 400 bytes, before its start"),
            std::string::npos)
      << m;
  float* in = device_floats(64);
  out = device_floats(32);
  ATTN_LAUNCH(1, 32, 0, nullptr, read_far_before_kernel)(in, out);
  m = fault_after_sync();
  EXPECT_NE(m.find("memcheck: an access at byte -6000 of a device allocation of 256 bytes, before its start"),
            std::string::npos)
      << m;
  // Writing within the buffer is fine.
  out = device_floats(100);
  ATTN_LAUNCH(1, 32, 0, nullptr, read_one_past_kernel)(out, out, 99);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFree(out), cudaSuccess);
}
#endif

// ---- graphs -------------------------------------------------------------------------------
TEST(EmulatorChecks, GraphCaptureFollowsTheCaptureRules) {
  cudaStream_t s, side;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
  float* a = device_floats(64);
  // A captured fill, replayed twice: the kernel runs at replay, not at capture.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ATTN_LAUNCH(1, 64, 0, s, fill_kernel)(a, 7.0f, 64);
  cudaGraph_t g = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  std::vector<float> h(64);
  ASSERT_EQ(cudaMemcpy(h.data(), a, 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_TRUE(std::isnan(h[0])) << "nothing ran during the capture";
  cudaGraphExec_t x = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
  for (int i = 0; i < 2; ++i) ASSERT_EQ(cudaGraphLaunch(x, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(h.data(), a, 64 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(h[0], 7.0f);
  cudaGraphExecDestroy(x);
  cudaGraphDestroy(g);
  // cudaMalloc during a capture invalidates it.
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  // A stream forked into the capture and never joined back.
  cudaEvent_t fork;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  ATTN_LAUNCH(1, 64, 0, side, fill_kernel)(a, 1.0f, 64);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  cudaGetLastError();
  cudaEventDestroy(fork);
  cudaFree(a);
  cudaStreamDestroy(s);
  cudaStreamDestroy(side);
}

// ---- a kernel fault is sticky, names the kernel, and cudaDeviceReset clears it -------------
TEST(EmulatorChecks, AFaultIsStickyUntilReset) {
  ATTN_LAUNCH(1, 64, 0, nullptr, exit_before_barrier_kernel)();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), 16), cudaErrorLaunchFailure) << "the fault is sticky";
  EXPECT_NE(std::string(cudaGetErrorString(cudaErrorLaunchFailure)).find("exit_before_barrier_kernel"),
            std::string::npos);
  ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), 16), cudaSuccess);
  cudaFree(p);
}

// ---- cuBLAS and NCCL ------------------------------------------------------------------------
TEST(EmulatorChecks, CublasSgemmAndTf32Rounding) {
  // C (2x2) = A (2x3) B (3x2), column-major; A's entries carry bits below TF32's mantissa.
  const float e = std::ldexp(1.0f, -15);  // below TF32's 10 bits at 1, kept by fp32
  std::vector<float> A = {1 + e, 0, 0, 1, 1, 1}, B = {1, 1, 1, 1, 0, 0}, C(4, 0.0f);
  float* dA = device_floats(6);
  float* dB = device_floats(6);
  float* dC = device_floats(4);
  ASSERT_EQ(cudaMemcpy(dA, A.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dB, B.data(), 24, cudaMemcpyHostToDevice), cudaSuccess);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  for (const bool tf32 : {false, true}) {
    ASSERT_EQ(cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_PEDANTIC_MATH), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, dA, 2, dB, 3, &zero, dC, 2),
              CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaMemcpy(C.data(), dC, 16, cudaMemcpyDeviceToHost), cudaSuccess);
    // C(0,0) = A(0,0) + A(0,1) + A(0,2) = (1 + e) + 0 + 1.
    EXPECT_EQ(C[0], tf32 ? 2.0f : 2.0f + e) << (tf32 ? "tf32" : "fp32");
  }
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, A.data(), 2, dB, 3, &zero, dC, 2),
            CUBLAS_STATUS_INVALID_VALUE)
      << "a host pointer as A";
  cublasDestroy(h);
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
}

TEST(EmulatorChecks, NcclAllReduceSumsAcrossDevicesAndNeedsAGroup) {
  int n = 0;
  ASSERT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  if (n < 2) GTEST_SKIP() << "needs ATTNSWEEP_EMULATED_GPUS=2";
  void* comms[2];
  const int devs[2] = {0, 1};
  ASSERT_EQ(ncclCommInitAll(comms, 2, devs), 0);
  float* buf[2];
  cudaStream_t st[2];
  for (int d = 0; d < 2; ++d) {
    cudaSetDevice(d);
    buf[d] = device_floats(8);
    std::vector<float> h(8, static_cast<float>(d + 1));
    ASSERT_EQ(cudaMemcpy(buf[d], h.data(), 32, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithFlags(&st[d], cudaStreamNonBlocking), cudaSuccess);
  }
  EXPECT_EQ(ncclAllReduce(buf[0], buf[0], 8, 7, 0, comms[0], st[0]), 5) << "two ranks from one thread, no group";
  ASSERT_EQ(ncclGroupStart(), 0);
  for (int d = 0; d < 2; ++d) ASSERT_EQ(ncclAllReduce(buf[d], buf[d], 8, 7, 0, comms[d], st[d]), 0);
  ASSERT_EQ(ncclGroupEnd(), 0);
  for (int d = 0; d < 2; ++d) {
    cudaSetDevice(d);
    ASSERT_EQ(cudaStreamSynchronize(st[d]), cudaSuccess);
    std::vector<float> h(8);
    ASSERT_EQ(cudaMemcpy(h.data(), buf[d], 32, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h[0], 3.0f) << "device " << d;
    cudaFree(buf[d]);
    cudaStreamDestroy(st[d]);
    ncclCommDestroy(comms[d]);
  }
  cudaSetDevice(0);
}

// ---- the two numerics (emulator/numerics.cpp) -----------------------------------------
// c + sum a[k] b[k] of one mma, b all ones: exact rounds once to nearest; hardware aligns
// each group of 8 to its largest addend (bits below 2^(e-23) dropped) and truncates.
float mma_sum(float c, std::vector<float> a, attnsweep::emu::Numerics mode) {
  a.resize(16, 0.0f);
  std::vector<float> ones(16, 1.0f);
  return attnsweep::emu::mma_dot16(a.data(), ones.data(), c, mode);
}

TEST(EmulatorChecks, HardwareNumericsMmaAlignsAndTruncatesEachGroupOfEight) {
  using attnsweep::emu::Numerics;
  const float ulp = std::ldexp(1.0f, -23), up = std::nextafter(1.0f, 2.0f);
  // 0.75 ulp above 1: nearest rounds up, truncation does not (either sign).
  EXPECT_EQ(mma_sum(1.0f, {0.75f * ulp}, Numerics::exact), up);
  EXPECT_EQ(mma_sum(1.0f, {0.75f * ulp}, Numerics::hardware), 1.0f);
  EXPECT_EQ(mma_sum(-1.0f, {-0.75f * ulp}, Numerics::exact), -up);
  EXPECT_EQ(mma_sum(-1.0f, {-0.75f * ulp}, Numerics::hardware), -1.0f);
  // Eight quarter-ulp products: 2 ulp in all, each dropped by the alignment to c's exponent.
  const std::vector<float> quarters(8, 0.25f * ulp);
  EXPECT_EQ(mma_sum(1.0f, quarters, Numerics::exact), 1.0f + 2 * ulp);
  EXPECT_EQ(mma_sum(1.0f, quarters, Numerics::hardware), 1.0f);
  // The same in the second group (k 8 ... 15), which is aligned to the first's result.
  std::vector<float> second(16, 0.0f);
  for (int k = 8; k < 16; ++k) second[k] = 0.25f * ulp;
  EXPECT_EQ(mma_sum(1.0f, second, Numerics::hardware), 1.0f);
  // Without c, the quarters are the largest addends: nothing is dropped.
  EXPECT_EQ(mma_sum(0.0f, quarters, Numerics::hardware), 2 * ulp);
  // Random bf16-like operands (B the largest |c| or |a b|): in each group 9 addends and the
  // sum are truncated by less than 2^-23 of its largest addend, at most B in the first and
  // |c| + 8 B <= 9 B in the second (10 B + 90 B ulp), and exact's one rounding adds half an
  // ulp of |c + sum| <= 17 B: within 110 B ulp of each other.
  uint32_t x = 12345;
  int differ = 0;
  for (int t = 0; t < 2000; ++t) {
    float a[16], b[16], big = 0;
    for (int k = 0; k < 16; ++k) {
      x = x * 1664525u + 1013904223u;
      a[k] = static_cast<float>(static_cast<int>(x >> 24) - 128) / 64.0f;  // 8 significant bits
      b[k] = static_cast<float>(static_cast<int>((x >> 8) & 255) - 128) / 32.0f;
      big = std::fmax(big, std::fabs(a[k] * b[k]));
    }
    const float c = static_cast<float>(static_cast<int>(x & 1023) - 512) / 7.0f;
    big = std::fmax(big, std::fabs(c));
    const float e = attnsweep::emu::mma_dot16(a, b, c, Numerics::exact);
    const float h = attnsweep::emu::mma_dot16(a, b, c, Numerics::hardware);
    ASSERT_LE(std::fabs(e - h), 110 * big * ulp) << "case " << t;
    differ += e != h;
  }
  EXPECT_GT(differ, 100) << "the hardware numerics round differently in some cases";
}

TEST(EmulatorChecks, HardwareNumericsEx2IsWithinTwoUlpAndExactAtIntegers) {
  using attnsweep::emu::Numerics;
  int differ = 0;
  for (int i = -4000; i < 4000; ++i) {
    const float x = static_cast<float>(i) / 97.0f;
    const float e = attnsweep::emu::ex2_approx_ftz(x, Numerics::exact);
    const float h = attnsweep::emu::ex2_approx_ftz(x, Numerics::hardware);
    ASSERT_EQ(h, attnsweep::emu::ex2_approx_ftz(x, Numerics::hardware)) << "the same input, the same result";
    float lo = e, hi = e;
    for (int k = 0; k < 2; ++k) lo = std::nextafter(lo, 0.0f), hi = std::nextafter(hi, INFINITY);
    ASSERT_TRUE(lo <= h && h <= hi) << "ex2(" << x << ") = " << h << " against " << e;
    differ += e != h;
  }
  EXPECT_GT(differ, 4000) << "about 4 in 5 results moved";
  for (int n = -100; n <= 100; ++n)
    EXPECT_EQ(attnsweep::emu::ex2_approx_ftz(static_cast<float>(n), Numerics::hardware), std::ldexp(1.0f, n));
}

}  // namespace
