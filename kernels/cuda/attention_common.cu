// Workspace, error reporting and the small deterministic helper kernels of the CUDA
// attention paths.
#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/launch.cuh"

#include <stdexcept>
#include <string>

namespace attnsweep::cuda {

namespace {

constexpr int kPrefixThreads = 1024;

// Block-wide inclusive scan of per-thread chunk counts; each thread owns a contiguous
// chunk of keys so the global order of the prefix is the key order.
__global__ void __launch_bounds__(kPrefixThreads)
    mask_prefix_kernel(const float* __restrict__ key_mask, int32_t* __restrict__ prefix, int64_t Nk) {
  __shared__ int32_t sums[kPrefixThreads];
  const int64_t b = blockIdx.x;
  const int tid = threadIdx.x;
  const int64_t chunk = (Nk + kPrefixThreads - 1) / kPrefixThreads;
  const int64_t lo = tid * chunk;
  const int64_t hi = lo + chunk < Nk ? lo + chunk : Nk;
  int32_t count = 0;
  for (int64_t j = lo; j < hi; ++j) count += key_mask[b * Nk + j] != 0.0f;
  sums[tid] = count;
  __syncthreads();
  // Hillis-Steele scan over the block (integers: exact, order irrelevant).
  for (int off = 1; off < kPrefixThreads; off <<= 1) {
    const int32_t add = tid >= off ? sums[tid - off] : 0;
    __syncthreads();
    sums[tid] += add;
    __syncthreads();
  }
  int32_t run = sums[tid] - count;  // exclusive prefix of this chunk
  for (int64_t j = lo; j < hi; ++j) {
    run += key_mask[b * Nk + j] != 0.0f;
    prefix[b * Nk + j] = run;
  }
}

constexpr int kReduceThreads = 256;

__global__ void __launch_bounds__(kReduceThreads)
    norm_reduce_kernel(const double* __restrict__ row_attn, const double* __restrict__ row_jac, int64_t Nq,
                       double* __restrict__ attn_fro, double* __restrict__ jac_fro) {
  __shared__ double sa[kReduceThreads];
  __shared__ double sj[kReduceThreads];
  const int64_t bh = blockIdx.x;
  const int tid = threadIdx.x;
  double a = 0.0, j = 0.0;
  for (int64_t i = tid; i < Nq; i += kReduceThreads) {
    a += row_attn[bh * Nq + i];
    j += row_jac[bh * Nq + i];
  }
  sa[tid] = a;
  sj[tid] = j;
  __syncthreads();
  for (int off = kReduceThreads / 2; off > 0; off >>= 1) {
    if (tid < off) {
      sa[tid] += sa[tid + off];
      sj[tid] += sj[tid + off];
    }
    __syncthreads();
  }
  if (tid == 0) {
    attn_fro[bh] = sqrt(sa[0]);
    jac_fro[bh] = sqrt(sj[0]);
  }
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* __restrict__ in, float* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

__global__ void f32_to_bf16_kernel(const float* __restrict__ in, __nv_bfloat16* __restrict__ out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}

// The AttnArgs part of a call; the key mask's prefix counted into prefix on the stream.
void set_attn_args(AttnArgs& a, const AttentionSpec& spec, const AttentionShape& sh, const void* Q, const void* K,
                   const void* V, const float* key_mask, int32_t* prefix, cudaStream_t stream) {
  a.act = spec.act;
  a.mask = make_mask(spec, sh, key_mask, prefix, stream);
  a.H = sh.H;
  a.scale = score_scale(spec, sh);
  a.Q = Q;
  a.K = K;
  a.V = V;
}

}  // namespace

FwdArgs forward_args(const AttentionSpec& spec, const AttentionShape& sh, const void* Q, const void* K, const void* V,
                     const float* key_mask, void* O, float* lse, bool norms, AttentionCudaWorkspace* ws,
                     cudaStream_t stream) {
  Carver carve(ws->reserve(scratch_bytes<AttentionFwdScratch>(sh.B, sh.H, sh.Nq, sh.Nk)));
  const AttentionFwdScratch s = AttentionFwdScratch::carve(carve, sh.B, sh.H, sh.Nq, sh.Nk);
  FwdArgs a;
  a.row_attn = s.row_attn;
  a.row_jac = s.row_jac;
  set_attn_args(a, spec, sh, Q, K, V, key_mask, s.prefix, stream);
  a.O = O;
  a.lse = lse;
  a.norms = norms;
  return a;
}

BwdArgs backward_args(const AttentionSpec& spec, const AttentionShape& sh, const void* Q, const void* K, const void* V,
                      const float* key_mask, const void* dO, const float* lse, void* dQ, void* dK, void* dV,
                      AttentionCudaWorkspace* ws, cudaStream_t stream) {
  Carver carve(ws->reserve(scratch_bytes<AttentionBwdScratch>(sh.B, sh.H, sh.Nq, sh.Nk)));
  const AttentionBwdScratch s = AttentionBwdScratch::carve(carve, sh.B, sh.H, sh.Nq, sh.Nk);
  const bool softmax = spec.act.activation == Activation::softmax;
  BwdArgs a;
  float* dsum = s.dsum;
  set_attn_args(a, spec, sh, Q, K, V, key_mask, s.prefix, stream);
  a.dO = dO;
  a.lse = softmax ? lse : nullptr;
  a.Dsum = softmax ? dsum : nullptr;
  a.dQ = dQ;
  a.dK = dK;
  a.dV = dV;
  return a;
}

void launch_mask_prefix(const float* key_mask, int32_t* prefix, int64_t B, int64_t Nk, cudaStream_t stream) {
  if (B == 0 || Nk == 0) return;
  ATTN_LAUNCH(static_cast<unsigned>(B), kPrefixThreads, 0, stream, mask_prefix_kernel)(key_mask, prefix, Nk);
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_norm_reduce(const double* row_attn, const double* row_jac, int64_t BH, int64_t Nq, double* attn_fro,
                        double* jac_fro, cudaStream_t stream) {
  if (BH == 0) return;
  ATTN_LAUNCH(static_cast<unsigned>(BH), kReduceThreads, 0, stream, norm_reduce_kernel)
  (row_attn, row_jac, Nq, attn_fro, jac_fro);
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ATTN_LAUNCH(map_blocks(n), kMapThreads, 0, stream, bf16_to_f32_kernel)(in, out, n);
  ATTN_CUDA_CHECK_LAUNCH();
}

void launch_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  ATTN_LAUNCH(map_blocks(n), kMapThreads, 0, stream, f32_to_bf16_kernel)(in, out, n);
  ATTN_CUDA_CHECK_LAUNCH();
}

}  // namespace attnsweep::cuda

namespace attnsweep {

char* AttentionCudaWorkspace::reserve(size_t n) {
  if (n > bytes) {
    // cudaFree waits for the device, so work still reading the old buffer finishes first.
    if (buffer) ATTN_CUDA_CHECK(cudaFree(buffer));
    buffer = nullptr;
    bytes = 0;
    const size_t grown = n + n / 4;
    ATTN_CUDA_CHECK(cudaMalloc(&buffer, grown));
    bytes = grown;
    ++epoch;
  }
  workspace_handed_over(static_cast<char*>(buffer));
  return static_cast<char*>(buffer);
}

__nv_bfloat16* AttentionCudaWorkspace::bf16_copy(int slot, const float* src, size_t count, cudaStream_t stream) {
  Bf16Buffer& b = gemm_in[slot];
  if (count > b.count) {
    if (b.p) ATTN_CUDA_CHECK(cudaFree(b.p));  // waits for the device: no reader is left
    b.p = nullptr;
    b.count = 0;
    ATTN_CUDA_CHECK(cudaMalloc(&b.p, count * sizeof(__nv_bfloat16)));
    b.count = count;
    ++epoch;
  }
  cuda::launch_f32_to_bf16(src, b.p, static_cast<int64_t>(count), stream);
  return b.p;
}

AttentionCudaWorkspace* attention_cuda_workspace_create() {
  auto* ws = new AttentionCudaWorkspace;
  const cublasStatus_t st = cublasCreate(&ws->cublas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    delete ws;
    cuda::throw_cublas_error(st, "cublasCreate", __FILE__, __LINE__);
  }
  // Plain FP32 GEMMs (no TF32): the materialising path is the oracle.
  ATTN_CUBLAS_CHECK(cublasSetMathMode(ws->cublas, CUBLAS_PEDANTIC_MATH));
  return ws;
}

void attention_cuda_workspace_reserve(AttentionCudaWorkspace* ws, size_t bytes) {
  ws->reserve(bytes);
}

uint64_t attention_cuda_workspace_epoch(const AttentionCudaWorkspace* ws) {
  return ws->epoch;
}

void attention_cuda_workspace_destroy(AttentionCudaWorkspace* ws) {
  if (!ws) return;
  if (ws->buffer) cudaFree(ws->buffer);  // no throw from a destructor path
  for (auto& b : ws->gemm_in)
    if (b.p) cudaFree(b.p);
  if (ws->cublas) cublasDestroy(ws->cublas);
  delete ws;
}

}  // namespace attnsweep
