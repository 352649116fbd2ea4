// The kernels of experiments/icl_prompts_cuda.h. One thread per token: it makes the token's d
// draws of x and its noise draw, each from its own Philox block (a block gives 4 normals, of
// which the thread keeps the one it needs: the draws are nothing next to a training step),
// and w once per prompt in shared memory.
#include <curand_philox4x32_x.h>

#include <stdexcept>
#include <string>

#include "experiments/icl_prompts_cuda.h"
#include "experiments/normals_math.h"
#include "kernels/cuda/device.cuh"

namespace attnsweep {
namespace {

// A float whose +, - and * round alone (__fadd_rn and friends are never contracted into an
// FMA, whatever -fmad says), for normals_math.h and icl_prompt_math.h on the device.
struct RnFloat {
  float v;
  __device__ RnFloat() : v(0.0f) {}
  __device__ RnFloat(float x) : v(x) {}  // NOLINT: implicit, as float literals in the math
};
__device__ __forceinline__ RnFloat operator+(RnFloat a, RnFloat b) {
  return __fadd_rn(a.v, b.v);
}
__device__ __forceinline__ RnFloat operator-(RnFloat a, RnFloat b) {
  return __fsub_rn(a.v, b.v);
}
__device__ __forceinline__ RnFloat operator*(RnFloat a, RnFloat b) {
  return __fmul_rn(a.v, b.v);
}

// normals_math.h's lane type of one CUDA thread.
struct CudaLanes {
  using U = uint32_t;
  using F = RnFloat;
  static __device__ __forceinline__ RnFloat from_bits(uint32_t u) { return __uint_as_float(u); }
  static __device__ __forceinline__ uint32_t to_bits(RnFloat f) { return __float_as_uint(f.v); }
  static __device__ __forceinline__ RnFloat from_int(uint32_t u) { return __int2float_rn(static_cast<int>(u)); }
  static __device__ __forceinline__ RnFloat sqrt(RnFloat x) { return __fsqrt_rn(x.v); }
};

// Output i of (key, stream): block i / 4 (experiments/normals.h).
__device__ __forceinline__ RnFloat normal_at(uint2 key, uint64_t stream, int64_t i) {
  const uint64_t b = static_cast<uint64_t>(i) / 4;
  const uint4 w = curand_Philox4x32_10(make_uint4(static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32),
                                                  static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)),
                                       key);
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  return normal_of_block<CudaLanes>(words, static_cast<int>(i % 4));
}

__host__ __device__ __forceinline__ uint2 key_words(uint64_t key) {
  return make_uint2(static_cast<uint32_t>(key), static_cast<uint32_t>(key >> 32));
}

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) normals_kernel(uint2 key, uint64_t stream, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < n) out[i] = normal_at(key, stream, i).v;
}

struct RowsOf {  // icl_token's g(i): the token's draws of x, made beforehand
  const RnFloat* g;
  __device__ __forceinline__ RnFloat operator()(int64_t i) const { return g[i]; }
};

// Block (token tile, prompt p).
__global__ void __launch_bounds__(kThreads)
    prompts_kernel(const IclPromptsCuda a, const int64_t* idx, float* x, float* y) {
  __shared__ float w[kIclMaxD];
  const int64_t p = blockIdx.y, T = a.L + 1, C = a.d + 1;
  const uint64_t stream = static_cast<uint64_t>(idx[p]);
  const uint2 key = key_words(a.key);
  const IclDraws draws{a.d, T};
  for (int k = threadIdx.x; k < a.d; k += kThreads) w[k] = (a.w_sd * normal_at(key, stream, draws.w(k))).v;
  __syncthreads();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= T) return;
  RnFloat g[kIclMaxD], xs[kIclMaxD];
  for (int64_t k = 0; k < a.d; ++k) g[k] = normal_at(key, stream, draws.g(k, t));
  const RnFloat eps = normal_at(key, stream, draws.eps(t));
  const RnFloat yt = icl_token<RnFloat>(a.chol, w, a.noise_sd, a.d, RowsOf{g}, eps, xs);
  float* tok = x + (p * T + t) * C;
  for (int64_t k = 0; k < a.d; ++k) tok[k] = xs[k].v;
  tok[a.d] = t < a.L ? yt.v : 0.0f;  // the query's y coordinate stays 0
  if (t == a.L) y[p] = yt.v;
}

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

}  // namespace

void icl_prompts_cuda(const IclPromptsCuda& a, const int64_t* idx, int64_t count, float* x, float* y,
                      cudaStream_t stream) {
  if (a.d < 1 || a.d > kIclMaxD || a.L < 1)
    throw std::invalid_argument("icl_prompts_cuda: d = " + std::to_string(a.d) + ", L = " + std::to_string(a.L) +
                                ": expected 1 <= d <= " + std::to_string(kIclMaxD) + " and L >= 1");
  if (count <= 0) return;
  const int64_t T = a.L + 1;
  ATTN_LAUNCH(dim3(static_cast<unsigned>((T + kThreads - 1) / kThreads), static_cast<unsigned>(count)), kThreads, 0,
              stream, prompts_kernel)
  (a, idx, x, y);
  check(cudaGetLastError(), "icl_prompts_cuda");
}

void philox_normals_cuda(uint64_t key, uint64_t stream_index, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  ATTN_LAUNCH(static_cast<unsigned>((n + kThreads - 1) / kThreads), kThreads, 0, stream, normals_kernel)
  (key_words(key), stream_index, out, n);
  check(cudaGetLastError(), "philox_normals_cuda");
}

}  // namespace attnsweep
