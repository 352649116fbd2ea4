// CUDA losses of kernels/ops_cuda.h: softmax cross-entropy and MSE (the forwards copy
// their value back, or leave it on the device for a step graph: *_sum_cuda,
// sum_squares_cuda), and global_norm_cuda, which shares MSE's sum of squares. CPU side:
// kernels/cpu/losses.cpp.
#include "kernels/cuda/reduce.cuh"
#include "kernels/model_ops_cuda.h"  // global_norm_cuda
#include "kernels/ops_cuda.h"

#include <cmath>

namespace attnsweep::cuda {
namespace {

// ---- softmax cross-entropy --------------------------------------------------------------

// Warp per row: first argmax, float64 normaliser, probs, the row's loss and hit.
__global__ void __launch_bounds__(kThreads)
    softmax_xent_forward_kernel(float* __restrict__ probs, double* __restrict__ row_loss, int32_t* __restrict__ row_ok,
                                const float* __restrict__ logits, const int32_t* __restrict__ targets, int64_t N,
                                int64_t V) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (i >= N) return;
  const float* x = logits + i * V;
  // Lane-local first maximum, then the warp's: larger value wins, ties go to the lower
  // index, so every lane ends with the first maximum of the row (as the CPU's scan).
  float best = 0.0f;
  int64_t arg = -1;
  for (int64_t j = lane; j < V; j += 32)
    if (arg < 0 || x[j] > best) {
      best = x[j];
      arg = j;
    }
  for (int off = 16; off > 0; off >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t oa = __shfl_xor_sync(0xffffffffu, arg, off);
    if (oa >= 0 && (arg < 0 || ob > best || (ob == best && oa < arg))) {
      best = ob;
      arg = oa;
    }
  }
  const double mx = best;
  double z = 0.0;
  for (int64_t j = lane; j < V; j += 32) z += exp(x[j] - mx);
  z = warp_sum(z);
  for (int64_t j = lane; j < V; j += 32) probs[i * V + j] = static_cast<float>(exp(x[j] - mx) / z);
  if (lane == 0) {
    const int32_t t = targets[i];
    row_loss[i] = -(x[t] - mx - log(z));  // -log softmax, stable
    row_ok[i] = arg == t;
  }
}

struct SoftmaxXentBackward {
  float* dlogits;
  const float* probs;
  const int32_t* targets;
  float s;
  int64_t V;
  __device__ void operator()(int64_t idx) const {
    const int64_t i = idx / V, j = idx % V;
    dlogits[idx] += s * (probs[idx] - (j == targets[i] ? 1.0f : 0.0f));
  }
};

// ---- MSE --------------------------------------------------------------------------------

// Stage 1 of the MSE and of the global norm: block b sums its grid-stride share of
// (pred - target)^2 (pred^2 when target is null) in float64 and writes partial[b]; the
// grid size is a function of n only.
__global__ void __launch_bounds__(kThreads)
    sum_squares_partial_kernel(const float* __restrict__ pred, const float* __restrict__ target, int64_t n,
                               double* __restrict__ partial) {
  __shared__ double ss[kThreads];
  const int tid = threadIdx.x;
  double s = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + tid; i < n;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const double e = target != nullptr ? static_cast<double>(pred[i]) - target[i] : static_cast<double>(pred[i]);
    s += e * e;
  }
  ss[tid] = s;
  __syncthreads();
  for (int off = kThreads / 2; off > 0; off >>= 1) {
    if (tid < off) ss[tid] += ss[tid + off];
    __syncthreads();
  }
  if (tid == 0) partial[blockIdx.x] = ss[0];
}

struct MseBackward {
  float* dpred;
  const float* pred;
  const float* target;
  float s;
  __device__ void operator()(int64_t i) const { dpred[i] += s * (pred[i] - target[i]); }
};

}  // namespace
}  // namespace attnsweep::cuda

namespace attnsweep {

using namespace cuda;

// ---- losses -------------------------------------------------------------------------------------

double softmax_crossentropy_forward_cuda(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                         int64_t N, int64_t V, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (N <= 0 || V <= 0) {
    if (n_correct != nullptr) *n_correct = 0;
    return 0.0;
  }
  // The result after the scratch of softmax_crossentropy_sum_cuda (which reserves less).
  Carver carve(ws->reserve(scratch_bytes<XentScratch>(N, true)));
  ScalarResult* result = XentScratch::carve(carve, N, true).result;
  softmax_crossentropy_sum_cuda(probs, logits, targets, N, V, result, ws, stream);
  const ScalarResult r = fetch_result(result, stream);  // synchronises the stream
  if (n_correct != nullptr) *n_correct = r.count;
  return r.sum / static_cast<double>(N);
}

void softmax_crossentropy_sum_cuda(float* probs, const float* logits, const int32_t* targets, int64_t N, int64_t V,
                                   CudaScalarSum* out, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  Carver carve(ws->reserve(scratch_bytes<XentScratch>(N, false)));
  const XentScratch s = XentScratch::carve(carve, N, false);
  double* row_loss = s.row_loss;
  int32_t* row_ok = s.row_ok;
  ATTN_LAUNCH(row_blocks(N), kThreads, 0, stream, softmax_xent_forward_kernel)
  (probs, row_loss, row_ok, logits, targets, N, V);
  ATTN_CUDA_CHECK_LAUNCH();
  ATTN_LAUNCH(1, kThreads, 0, stream, sum_doubles_kernel)(row_loss, row_ok, N, out);
  ATTN_CUDA_CHECK_LAUNCH();
}

void softmax_crossentropy_backward_cuda(float* dlogits, const float* probs, const int32_t* targets, float dloss,
                                        int64_t N, int64_t V, cudaStream_t stream) {
  if (N <= 0 || V <= 0) return;
  launch_map(SoftmaxXentBackward{dlogits, probs, targets, dloss / static_cast<float>(N), V}, N * V, stream);
}

namespace {

int64_t sum_squares_blocks(int64_t n) {
  return std::clamp<int64_t>((n + 8 * kThreads - 1) / (8 * kThreads), 1, kMaxSumSquaresBlocks);  // from n only
}

// Partials of sum_squares_cuda, then out: the scratch holds `blocks` doubles first.
void sum_squares_into(const float* pred, const float* target, int64_t n, ScalarResult* out, char* scratch,
                      cudaStream_t stream) {
  const int64_t blocks = sum_squares_blocks(n);
  Carver carve(scratch);
  double* partial = SumSquaresScratch::carve(carve, blocks, false).partial;
  ATTN_LAUNCH(static_cast<unsigned>(blocks), kThreads, 0, stream, sum_squares_partial_kernel)(pred, target, n, partial);
  ATTN_CUDA_CHECK_LAUNCH();
  ATTN_LAUNCH(1, kThreads, 0, stream, sum_doubles_kernel)(partial, nullptr, blocks, out);
  ATTN_CUDA_CHECK_LAUNCH();
}

// sum (pred - target)^2 (target may be null) over n > 0, in float64, partition fixed by n.
double sum_squares(const float* pred, const float* target, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  const int64_t blocks = sum_squares_blocks(n);
  char* base = ws->reserve(scratch_bytes<SumSquaresScratch>(blocks, true));
  Carver carve(base);
  ScalarResult* result = SumSquaresScratch::carve(carve, blocks, true).result;
  sum_squares_into(pred, target, n, result, base, stream);
  return fetch_result(result, stream).sum;  // synchronises the stream
}

}  // namespace

void sum_squares_cuda(const float* pred, const float* target, int64_t n, CudaScalarSum* out, AttentionCudaWorkspace* ws,
                      cudaStream_t stream) {
  if (n <= 0) {
    ATTN_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof *out, stream));
    return;
  }
  sum_squares_into(pred, target, n, out, ws->reserve(scratch_bytes<SumSquaresScratch>(sum_squares_blocks(n), false)),
                   stream);
}

double mse_forward_cuda(const float* pred, const float* target, int64_t n, AttentionCudaWorkspace* ws,
                        cudaStream_t stream) {
  if (n <= 0) return 0.0;
  return sum_squares(pred, target, n, ws, stream) / static_cast<double>(n);
}

double global_norm_cuda(const float* g, int64_t n, AttentionCudaWorkspace* ws, cudaStream_t stream) {
  if (n <= 0) return 0.0;
  return std::sqrt(sum_squares(g, nullptr, n, ws, stream));
}

void mse_backward_cuda(float* dpred, const float* pred, const float* target, float dloss, int64_t n,
                       cudaStream_t stream) {
  if (n <= 0) return;
  launch_map(MseBackward{dpred, pred, target, 2.0f * dloss / static_cast<float>(n)}, n, stream);
}

}  // namespace attnsweep
