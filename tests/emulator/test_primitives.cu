// The device primitives the kernels rely on, against the PTX ISA by hand: mma.sync
// m16n8k16 (bf16 and f16), ldmatrix .x4 and .x4.trans, __shfl_xor_sync with widths,
// cp.async with a partial source, ex2.approx. Each test fills the operands from the ISA's
// lane maps written out here (not the emulator's code) and checks one hand-worked lane
// as well as every lane. Built for the emulated device (ctest emulator.primitives) and,
// with nvcc, for a GPU (gpu_primitive_tests, bench/gpu-check.sh's emulator stage): the same
// expectations must hold on both.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/device.cuh"
#include "kernels/cuda/ptx.cuh"

namespace {

#define CHECK_CUDA(call) ASSERT_EQ((call), cudaSuccess) << cudaGetErrorString(cudaGetLastError())

template <class T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) { cudaMalloc(reinterpret_cast<void**>(&p), count * sizeof(T)); }
  ~DeviceBuffer() { cudaFree(p); }
  void put(const std::vector<T>& v) { cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost);
    return v;
  }
};

// ---- mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 -------------------
// groupID = lane >> 2, tig = lane % 4 (PTX ISA, "Matrix Fragments for mma.m16n8k16").
__device__ int a_row(int lane, int i) {
  return (lane >> 2) + ((i == 2 || i == 3 || i == 6 || i == 7) ? 8 : 0);
}
__device__ int a_col(int lane, int i) {
  return 2 * (lane % 4) + (i & 1) + (i >= 4 ? 8 : 0);
}
__device__ int b_row(int lane, int i) {
  return 2 * (lane % 4) + (i & 1) + (i >= 2 ? 8 : 0);
}
__device__ int c_row(int lane, int i) {
  return (lane >> 2) + (i >= 2 ? 8 : 0);
}
__device__ int c_col(int lane, int i) {
  return 2 * (lane % 4) + (i & 1);
}

template <class T>
__device__ uint32_t pack(T lo, T hi) {
  uint16_t l, h;
  memcpy(&l, &lo, 2);
  memcpy(&h, &hi, 2);
  return uint32_t{l} | (uint32_t{h} << 16);
}

// One warp: D = A B + C with A 16x16, B 16x8 (row-major in memory), C, D 16x8; each lane
// also writes its four d registers in lane order to Dlane.
template <class T>
__global__ void mma_kernel(const T* A, const T* B, const float* C, float* D, float* Dlane) {
  const int lane = threadIdx.x;
  uint32_t a[4], b[2];
  for (int r = 0; r < 4; ++r)
    a[r] =
        pack(A[a_row(lane, 2 * r) * 16 + a_col(lane, 2 * r)], A[a_row(lane, 2 * r + 1) * 16 + a_col(lane, 2 * r + 1)]);
  for (int r = 0; r < 2; ++r)
    b[r] = pack(B[b_row(lane, 2 * r) * 8 + (lane >> 2)], B[b_row(lane, 2 * r + 1) * 8 + (lane >> 2)]);
  float c[4];
  for (int i = 0; i < 4; ++i) c[i] = C[c_row(lane, i) * 8 + c_col(lane, i)];
  attnsweep::cuda::mma::mma16816<T>(c, a, b[0], b[1]);
  for (int i = 0; i < 4; ++i) {
    D[c_row(lane, i) * 8 + c_col(lane, i)] = c[i];
    Dlane[lane * 4 + i] = c[i];
  }
}

template <class T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else
    return __float2half(x);
}
template <class T>
float to_float(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else
    return __half2float(x);
}

template <class T>
void run_mma(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& C,
             std::vector<float>& D, std::vector<float>& Dlane) {
  std::vector<T> a(256), b(128);
  for (int i = 0; i < 256; ++i) a[static_cast<size_t>(i)] = from_float<T>(A[static_cast<size_t>(i)]);
  for (int i = 0; i < 128; ++i) b[static_cast<size_t>(i)] = from_float<T>(B[static_cast<size_t>(i)]);
  DeviceBuffer<T> da(256), db(128);
  DeviceBuffer<float> dc(128), dd(128), dl(128);
  da.put(a);
  db.put(b);
  dc.put(C);
  ATTN_LAUNCH(1, 32, 0, nullptr, mma_kernel<T>)(da.p, db.p, dc.p, dd.p, dl.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  D = dd.get();
  Dlane = dl.get();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

template <class T>
void mma_identity_case() {
  // A = I (16x16), B[k][n] = 8k + n, C = 0.5: D[m][n] = 8m + n + 0.5, exact in either type.
  std::vector<float> A(256, 0.0f), B(128), C(128, 0.5f), D, Dlane;
  for (int i = 0; i < 16; ++i) A[static_cast<size_t>(i * 16 + i)] = 1.0f;
  for (int i = 0; i < 128; ++i) B[static_cast<size_t>(i)] = static_cast<float>(i);
  run_mma<T>(A, B, C, D, Dlane);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) EXPECT_EQ(D[static_cast<size_t>(m * 8 + n)], 8.0f * m + n + 0.5f) << m << "," << n;
  // By hand: lane 5 is groupID 1, tig 1: c0 (1,2), c1 (1,3), c2 (9,2), c3 (9,3).
  EXPECT_EQ(Dlane[20], 10.5f);
  EXPECT_EQ(Dlane[21], 11.5f);
  EXPECT_EQ(Dlane[22], 74.5f);
  EXPECT_EQ(Dlane[23], 75.5f);
}

template <class T>
void mma_random_case() {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  std::vector<float> A(256), B(128), C(128), D, Dlane;
  for (float& x : A) x = to_float(from_float<T>(nd(rng)));
  for (float& x : B) x = to_float(from_float<T>(nd(rng)));
  for (float& x : C) x = nd(rng);
  run_mma<T>(A, B, C, D, Dlane);
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      double want = C[static_cast<size_t>(m * 8 + n)];
      double mag = std::fabs(want);
      for (int k = 0; k < 16; ++k) {
        want += static_cast<double>(A[static_cast<size_t>(m * 16 + k)]) * B[static_cast<size_t>(k * 8 + n)];
        mag += std::fabs(static_cast<double>(A[static_cast<size_t>(m * 16 + k)]) * B[static_cast<size_t>(k * 8 + n)]);
      }
      // The tensor core's order of accumulation is unspecified: a few float32 roundings
      // of the magnitude, 17 terms.
      EXPECT_NEAR(D[static_cast<size_t>(m * 8 + n)], want, 17 * 1.2e-7 * mag + 1e-30) << m << "," << n;
    }
}

TEST(EmulatedPrimitives, MmaBf16HandWorkedAndRandom) {
  mma_identity_case<__nv_bfloat16>();
  mma_random_case<__nv_bfloat16>();
}
TEST(EmulatedPrimitives, MmaF16HandWorkedAndRandom) {
  mma_identity_case<__half>();
  mma_random_case<__half>();
}

// ---- ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16 ----------------------------------
// Four 8x8 matrices of 16-bit values in shared memory, matrix i row r at 16-byte row
// stride 24 elements (padded, as the kernels do); value 64 i + 8 r + c. Lane t gives the
// address of matrix t / 8, row t % 8.
template <bool Trans>
__global__ void ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t tile[4 * 8 * 24];
  const int t = threadIdx.x;
  for (int k = t; k < 4 * 8 * 24; k += 32) {
    const int i = k / (8 * 24), r = (k / 24) % 8, c = k % 24;
    tile[k] = static_cast<uint16_t>(c < 8 ? 64 * i + 8 * r + c : 0xdead);
  }
  __syncthreads();
  uint32_t reg[4];
  const uint16_t* row = &tile[(t / 8) * 8 * 24 + (t % 8) * 24];
  if constexpr (Trans)
    attnsweep::cuda::mma::ldmatrix_x4_trans(reg, row);
  else
    attnsweep::cuda::mma::ldmatrix_x4(reg, row);
  for (int i = 0; i < 4; ++i) out[t * 4 + i] = reg[i];
}

template <bool Trans>
std::vector<uint32_t> run_ldmatrix() {
  DeviceBuffer<uint32_t> out(128);
  ATTN_LAUNCH(1, 32, 0, nullptr, ldmatrix_kernel<Trans>)(out.p);
  std::vector<uint32_t> v = out.get();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return v;
}

TEST(EmulatedPrimitives, LdmatrixX4) {
  const std::vector<uint32_t> r = run_ldmatrix<false>();
  // Register i of thread t: matrix i, row t / 4, columns 2 (t % 4) and 2 (t % 4) + 1.
  for (uint32_t t = 0; t < 32; ++t)
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t lo = 64 * i + 8 * (t / 4) + 2 * (t % 4);
      EXPECT_EQ(r[t * 4 + i], lo | (lo + 1) << 16) << "thread " << t << " register " << i;
    }
  // By hand: thread 5, register 2 = matrix 2, row 1, columns 2 and 3: 138, 139.
  EXPECT_EQ(r[22], 138u | 139u << 16);
}

TEST(EmulatedPrimitives, LdmatrixX4Trans) {
  const std::vector<uint32_t> r = run_ldmatrix<true>();
  // .trans: thread t gets [2 (t % 4) + j][t / 4] of matrix i, j = 0 (low), 1 (high).
  for (uint32_t t = 0; t < 32; ++t)
    for (uint32_t i = 0; i < 4; ++i) {
      const uint32_t lo = 64 * i + 8 * (2 * (t % 4)) + t / 4, hi = lo + 8;
      EXPECT_EQ(r[t * 4 + i], lo | hi << 16) << "thread " << t << " register " << i;
    }
  // By hand: thread 5, register 2 = matrix 2, rows 2 and 3 of column 1: 145, 153.
  EXPECT_EQ(r[22], 145u | 153u << 16);
}

// ---- __shfl_xor_sync -------------------------------------------------------------------
__global__ void shfl_kernel(int* out) {
  const int t = threadIdx.x;
  for (int m = 1; m < 32; m <<= 1)
    out[(m == 1 ? 0 : m == 2 ? 1 : m == 4 ? 2 : m == 8 ? 3 : 4) * 32 + t] = __shfl_xor_sync(0xffffffffu, 100 + t, m);
  // Width 16: lane t ^ 16 lies in the next group for t < 16 (own value), in the previous one for t >= 16.
  out[5 * 32 + t] = __shfl_xor_sync(0xffffffffu, 100 + t, 16, 16);
  out[6 * 32 + t] = __shfl_xor_sync(0xffffffffu, 100 + t, 2, 4);
}

TEST(EmulatedPrimitives, ShuffleXorWithWidths) {
  DeviceBuffer<int> out(7 * 32);
  ATTN_LAUNCH(1, 32, 0, nullptr, shfl_kernel)(out.p);
  const std::vector<int> r = out.get();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int k = 0; k < 5; ++k)
    for (int t = 0; t < 32; ++t) EXPECT_EQ(r[static_cast<size_t>(k * 32 + t)], 100 + (t ^ (1 << k)));
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(r[static_cast<size_t>(5 * 32 + t)], t < 16 ? 100 + t : 100 + t - 16) << t;
    EXPECT_EQ(r[static_cast<size_t>(6 * 32 + t)], 100 + (t ^ 2)) << t;
  }
}

// ---- cp.async.cg 16 bytes with src-size, commit, wait_group ------------------------------
__global__ void cp_async_kernel(const float* src, float* out) {
  __shared__ __align__(16) float buf[2][32 * 4];
  const int t = threadIdx.x;
  // Group 0: 16 bytes; group 1: 8 of 16 bytes (the rest zero-filled).
  attnsweep::cuda::mma::cp_async16(&buf[0][t * 4], src + t * 4, 16);
  attnsweep::cuda::mma::cp_async_commit();
  attnsweep::cuda::mma::cp_async16(&buf[1][t * 4], src + 128 + t * 4, 8);
  attnsweep::cuda::mma::cp_async_commit();
  attnsweep::cuda::mma::cp_async_wait<1>();  // group 0 has landed
  for (int k = 0; k < 4; ++k) out[t * 4 + k] = buf[0][t * 4 + k];
  attnsweep::cuda::mma::cp_async_wait<0>();
  for (int k = 0; k < 4; ++k) out[128 + t * 4 + k] = buf[1][t * 4 + k];
}

TEST(EmulatedPrimitives, CpAsyncPartialSourceZeroFills) {
  std::vector<float> src(256);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.25f;
  DeviceBuffer<float> s(256), out(256);
  s.put(src);
  ATTN_LAUNCH(1, 32, 0, nullptr, cp_async_kernel)(s.p, out.p);
  const std::vector<float> r = out.get();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (size_t i = 0; i < 128; ++i) EXPECT_EQ(r[i], src[i]);
  for (size_t i = 0; i < 128; ++i) EXPECT_EQ(r[128 + i], i % 4 < 2 ? src[128 + i] : 0.0f) << i;
}

// ---- ex2.approx.ftz.f32 -----------------------------------------------------------------
__global__ void ex2_kernel(const float* in, float* out, int n) {
  for (int i = threadIdx.x; i < n; i += blockDim.x) out[i] = attnsweep::cuda::mma::ex2(in[i]);
}

TEST(EmulatedPrimitives, Ex2ApproxWithinTwoUlpAndFlushesSubnormals) {
  const std::vector<float> in = {0.0f, 1.0f, -1.0f, 10.5f, -126.5f, -140.0f, -INFINITY, 3.0e-39f, 127.9f};
  DeviceBuffer<float> d(in.size()), o(in.size());
  d.put(in);
  ATTN_LAUNCH(1, 32, 0, nullptr, ex2_kernel)(d.p, o.p, static_cast<int>(in.size()));
  const std::vector<float> r = o.get();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(r[0], 1.0f);
  EXPECT_EQ(r[1], 2.0f);
  EXPECT_EQ(r[2], 0.5f);
  EXPECT_NEAR(r[3], std::exp2(10.5), 2 * 1.2e-7 * std::exp2(10.5));
  EXPECT_EQ(r[4], 0.0f) << "2^-126.5 is subnormal: flushed";
  EXPECT_EQ(r[5], 0.0f);
  EXPECT_EQ(r[6], 0.0f) << "ex2(-inf) = +0";
  EXPECT_EQ(r[7], 1.0f) << "a subnormal input is flushed to 0: 2^0";
  const double big = std::exp2(static_cast<double>(in[8]));  // of the float 127.9f
  EXPECT_NEAR(r[8], big, 2 * 1.2e-7 * big);
}

}  // namespace
