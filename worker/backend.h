// Backends of the model and trainer (worker/model.h, worker/trainer.h): the one
// forward/backward sequence in model.cpp is a template over a backend type, which owns
// the buffers and runs each op of kernels/ops.h and kernels/model_ops.h on its device.
// CpuBackend (here) calls the CPU ops directly: each member is an inline forward to the
// free function, so the CPU path costs what it cost before the abstraction (one direct
// call per op, nothing per element). CudaBackend (worker/backend_cuda.h) calls the
// *_cuda ops with its workspace and stream.
//
// What a backend provides (the members below, with the same names on every backend):
// - Array<T>: a buffer on the device (allocate(a, n) zero-fills it); upload / download
//   between host and device floats; input(slot, host, n): the device copy of a batch
//   input (CPU: the host pointer itself); to_host(p, n): host view of device doubles.
// - bind(): make this backend's device current in the calling thread (CUDA: cudaSetDevice);
//   synchronize(): wait for the work queued so far (CUDA: the stream).
// - every op with the CPU argument order, minus workspace and stream.
// - Collective: the gradient all-reduce of data-parallel replicas, and
//   kEveryReplicaUpdates: whether every replica applies the update itself (CUDA, after an
//   all-reduce that leaves the mean gradient on every replica) or replica 0 does and its
//   parameters are broadcast (CPU, where the mean lands on replica 0 only).
// - for_each_replica(k, f): f(0) .. f(k-1), one after another (CPU: the parallelism is
//   the OpenMP team inside each op) or one host thread per device (CUDA).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/model_ops.h"
#include "kernels/ops.h"

namespace attnsweep {

// Batch inputs a backend stages to its device (one buffer each).
enum InputSlot : int {
  kInputX = 0,
  kInputIds = 1,
  kInputYClass = 2,
  kInputYValue = 3,
  kInputMask = 4,
  kNumInputSlots = 5
};

#define ATTNSWEEP_CPU_OP(name)      \
  template <class... A>             \
  auto name(A... a) {               \
    return ::attnsweep::name(a...); \
  }

class CpuBackend {
 public:
  static constexpr bool kDevice = false;
  static constexpr bool kEveryReplicaUpdates = false;
  template <class T>
  using Array = std::vector<T>;

  explicit CpuBackend(int /*device*/ = 0) {}
  void bind() {}
  void synchronize() {}
  template <class T>
  void allocate(std::vector<T>& a, int64_t n) {
    a.assign(static_cast<size_t>(n), T{});
  }
  void zero(float* p, int64_t n) { std::memset(p, 0, static_cast<size_t>(n) * sizeof(float)); }
  void upload(float* dst, const float* host, int64_t n) {
    std::memcpy(dst, host, static_cast<size_t>(n) * sizeof(float));
  }
  void download(float* host, const float* src, int64_t n) {
    std::memcpy(host, src, static_cast<size_t>(n) * sizeof(float));
  }
  template <class T>
  const T* input(InputSlot, const T* host, int64_t) {
    return host;
  }
  const double* to_host(const double* p, int64_t) { return p; }

  ATTNSWEEP_CPU_OP(matmul_forward)
  ATTNSWEEP_CPU_OP(matmul_backward)
  ATTNSWEEP_CPU_OP(matmul_backward_overwrite)  // CPU only (model.cpp: if constexpr)
  ATTNSWEEP_CPU_OP(matmul_residual_forward)    // CPU only (model.cpp: if constexpr)
  ATTNSWEEP_CPU_OP(matmul_gelu_forward)
  ATTNSWEEP_CPU_OP(gelu_matmul_backward)
  ATTNSWEEP_CPU_OP(layernorm_forward)
  ATTNSWEEP_CPU_OP(layernorm_backward)
  ATTNSWEEP_CPU_OP(gelu_forward)
  ATTNSWEEP_CPU_OP(gelu_backward)
  ATTNSWEEP_CPU_OP(residual_forward)
  ATTNSWEEP_CPU_OP(meanpool_forward)
  ATTNSWEEP_CPU_OP(meanpool_backward)
  ATTNSWEEP_CPU_OP(softmax_crossentropy_forward)
  ATTNSWEEP_CPU_OP(softmax_crossentropy_backward)
  ATTNSWEEP_CPU_OP(mse_forward)
  ATTNSWEEP_CPU_OP(mse_backward)
  ATTNSWEEP_CPU_OP(embedding_forward)
  ATTNSWEEP_CPU_OP(embedding_backward)
  ATTNSWEEP_CPU_OP(adamw_update)
  ATTNSWEEP_CPU_OP(sgd_update)
  ATTNSWEEP_CPU_OP(split_heads)
  ATTNSWEEP_CPU_OP(merge_heads)
  ATTNSWEEP_CPU_OP(heads_to_rows)
  ATTNSWEEP_CPU_OP(rows_to_heads)
  ATTNSWEEP_CPU_OP(tokens_forward)
  ATTNSWEEP_CPU_OP(tokens_backward)
  ATTNSWEEP_CPU_OP(cls_pool_forward)
  ATTNSWEEP_CPU_OP(cls_pool_backward)
  ATTNSWEEP_CPU_OP(masked_meanpool_forward)
  ATTNSWEEP_CPU_OP(masked_meanpool_backward)
  ATTNSWEEP_CPU_OP(readout_split)
  ATTNSWEEP_CPU_OP(readout_merge)
  ATTNSWEEP_CPU_OP(readout_pick)
  ATTNSWEEP_CPU_OP(readout_pick_backward)
  ATTNSWEEP_CPU_OP(scale_inplace)
  ATTNSWEEP_CPU_OP(global_norm)

  // key_mask (B, Nk) or null (worker/model.h: padding).
  void attention_forward(const AttentionSpec& spec, const AttentionShape& shape, const float* q, const float* k,
                         const float* v, const float* key_mask, float* o, float* lse, double* attn_fro,
                         double* jac_fro) {
    attention_forward_cpu(spec, shape, q, k, v, key_mask, o, lse, attn_fro, jac_fro);
  }
  void attention_backward(const AttentionSpec& spec, const AttentionShape& shape, const float* q, const float* k,
                          const float* v, const float* key_mask, const float* o, const float* dout, const float* lse,
                          float* dq, float* dk, float* dv) {
    attention_backward_cpu(spec, shape, q, k, v, key_mask, o, dout, lse, dq, dk, dv);
  }

  // The packed fast path (kernels/attention.h; CPU only: model.cpp calls these under
  // `if constexpr (!Backend::kDevice)`, so a device backend need not have them).
  static bool attention_packed_usable(const AttentionSpec& spec, const AttentionShape& shape) {
    return attention_packed_cpu_usable(spec, shape);
  }
  void attention_forward_packed(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv, float* o,
                                float* lse, double* attn_fro, double* jac_fro) {
    attention_forward_packed_cpu(spec, shape, qkv, o, lse, attn_fro, jac_fro);
  }
  void attention_backward_packed(const AttentionSpec& spec, const AttentionShape& shape, const float* qkv,
                                 const float* o, const float* dout, const float* lse, float* dqkv) {
    attention_backward_packed_cpu(spec, shape, qkv, o, dout, lse, dqkv);
  }

  template <class F>
  static void for_each_replica(int64_t k, F&& f) {
    for (int64_t r = 0; r < k; ++r) f(r);
  }

  // grads[0] = the mean of grads[0 .. k): per element, in replica order, in float64, then
  // / k; the same value for any thread count (threads split the elements, never a sum).
  class Collective {
   public:
    explicit Collective(const std::vector<CpuBackend*>&) {}
    void allreduce_mean(const std::vector<float*>& grads, int64_t n);
  };
};

#undef ATTNSWEEP_CPU_OP

}  // namespace attnsweep
