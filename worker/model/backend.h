// Backends of the model and trainer (worker/model/model.h, worker/training/trainer.h): the one
// forward/backward sequence in model_impl.h is a template over a backend type, which owns
// the buffers and runs each op of kernels/ops.h and kernels/model_ops.h on its device.
// CpuBackend (here) calls the CPU ops directly: each plain op is an inline forward to the
// free function, so the CPU path costs what it cost before the abstraction (one direct
// call per op, nothing per element). CudaBackend (worker/model/backend_cuda.h) calls the
// *_cuda ops with its workspace and stream. Both make those forwards from one list of
// the plain ops, kernels/op_list.h.
//
// The contract is the concept ModelBackend below (both backends are checked against it):
// - Array<T>: a buffer on the device (allocate(a, n) zero-fills it); upload / download
//   between host and device floats; input(slot, host, n): the device copy of a batch
//   input (CPU: the host pointer itself); to_host(p, n): host view of device doubles;
//   host_view(p, n, buf): host view of device floats (CPU: p; a device copies into buf).
// - set_precision(p): the arithmetic of its GEMMs and attention (kernels/precision.h);
//   a backend that has only fp32 (the CPU) throws for anything else, naming the key.
// - bind(): make this backend's device current in the calling thread (CUDA: cudaSetDevice);
//   synchronize(): wait for the work queued so far (CUDA: the stream).
// - every plain op with the CPU argument order, minus workspace and stream: those of
//   kernels/op_list.h (their requirements generated from the list, ModelBackendPlainOps),
//   and the losses' forwards and global_norm (hand-written on CUDA).
// - the composite ops (their signatures and what each stands for: the list
//   ATTNSWEEP_COMPOSITE_OPS, below, which both backends declare them from; their
//   requirements generated from it, ModelBackendComposites), where the backends differ in
//   how, not in what: each names the op sequence it stands for, which is what a device
//   backend runs; the CPU runs its fused version (the same values): matmul_residual_forward, matmul_gelu_forward,
//   matmul_backward_overwrite, gelu_matmul_backward, attention_block_forward / _backward
//   (CPU: the packed path on small heads), and the per-layer hooks layer_forward_fused /
//   layer_backward_fused (CPU: the whole layer per block of samples; a device: never).
//   layer_buffers says which per-layer buffers those paths use, so the model allocates
//   only those; readout_fused (the read-out head in its own algebra: kernels/readout.h on
//   the CPU, kernels/readout_cuda.h on CUDA) and readout_together (the same for several
//   models' cells on one batch in one call: a group of cells, worker/training/cell_group_loop.h).
// - kPadding: whether a key mask (padding) is supported.
// - Collective: the gradient all-reduce of data-parallel replicas, and
//   kEveryReplicaUpdates: whether every replica applies the update itself (CUDA, after an
//   all-reduce that leaves the mean gradient on every replica) or replica 0 does and its
//   parameters are broadcast (CPU, where the mean lands on replica 0 only).
// - for_each_replica(k, f): f(0) .. f(k-1), one after another (CPU: the parallelism is
//   the OpenMP team inside each op) or one host thread per device (CUDA).
// - the optimiser's ops: clip_gradients(g, n, coef) (a scale when coef < 1), adamw_update,
//   sgd_update (kernels/ops.h); the trainer's one update sequence calls them.
// - graphed_step(B, args, body): a whole step as one launch (CUDA: body, the step's host
//   code, captured once as a graph and replayed, the clip decided and the lr and bias
//   corrections read on the device, worker/model/backend_cuda.h); std::nullopt when this step
//   runs op by op (always on the CPU); graphed_steps() counts those that ran as one.
// - kPrefetchBatches: whether the host makes batch t + 1 while the device runs step t
//   (worker/training/cell_loop.h; CUDA), or in line (CPU: the host is the device).
// - fills_batches(): whether the backend makes training batches itself from their sample
//   indices (CUDA with the task's TrainingData::fill_device, when switched on: then the
//   host makes none); fill_batch(idx, B, x_n, y_n): the device x (x_n floats) and y_value
//   (y_n) of samples idx[0, B) (host indices), queued; the CPU: never.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "kernels/attention.h"
#include "kernels/model_ops.h"
#include "kernels/op_list.h"
#include "kernels/ops.h"
#include "kernels/precision.h"
#include "kernels/readout.h"

namespace attnsweep {

struct ModelConfig;  // worker/model/model_layout.h

// Batch inputs a backend stages to its device (one buffer each).
enum InputSlot : int {
  kInputX = 0,
  kInputIds = 1,
  kInputYClass = 2,
  kInputYValue = 3,
  kInputMask = 4,
  kInputSampleIds = 5,  // a batch's sample indices, for a backend that makes the batch (fill_batch)
  kNumInputSlots = 6
};

// The split-heads copies of one attention: q, k, v and the output o, each (B, H, T, hd);
// or their gradients.
struct HeadBuffers {
  float *q, *k, *v, *o;
};

// The host's part of a step run as one launch (graphed_step): the learning rate, AdamW's
// betas and 1-based step (for the bias corrections), the clip (0: off).
struct StepGraphArgs {
  double lr = 0;
  int64_t t1 = 1;
  float beta1 = 0.9f, beta2 = 0.999f;
  double clip = 0;
};
// What such a step measured (TrainStepResult's loss, correct count and gradient norm).
struct GraphedStep {
  double loss = 0;
  int64_t correct = 0;
  double grad_norm = 0;
};

// Which per-layer buffers of a transformer layer (worker/model/model.h Acts, Scratch) a
// backend's path through it uses, beyond those every path uses; the model allocates the
// others not at all (their pointers are null).
struct LayerBuffers {
  bool split_heads = true;  // q, k, v, atty and dq, dk, dv, datty (attention_block_*)
  bool gelu_out = true;     // fch_gelu: the GELU's output, kept for fcproj's backward
  bool op_grads = true;     // dbig, dqkv: the gradients between the ops of an unfused layer
  bool gelu_grad = true;    // dbig2: gelu_matmul_backward's dgelu (an unfused GELU backward)
  bool covers(const LayerBuffers& o) const {
    return (split_heads || !o.split_heads) && (gelu_out || !o.gelu_out) && (op_grads || !o.op_grads) &&
           (gelu_grad || !o.gelu_grad);
  }
};

// The plain ops' part of ModelBackend, from the op list (kernels/op_list.h): B has a member
// `name` callable with the row's parameters (kernels/op_list.h plain_op_signature::name).
#define ATTNSWEEP_PLAIN_OP_CALLABLE(name, params)                                       \
  template <class Be, class Signature>                                                  \
  constexpr bool plain_op_callable_##name = false;                                      \
  template <class Be, class... P>                                                       \
  constexpr bool plain_op_callable_##name<Be, void(P...)> = requires(Be & be, P... p) { \
    be.name(p...);                                                                      \
  };
ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_PLAIN_OP_CALLABLE, ATTNSWEEP_PLAIN_OP_CALLABLE)
#undef ATTNSWEEP_PLAIN_OP_CALLABLE
#define ATTNSWEEP_PLAIN_OP_REQUIRED(name, params) plain_op_callable_##name<B, plain_op_signature::name>&&
template <class B>
concept ModelBackendPlainOps = ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_PLAIN_OP_REQUIRED, ATTNSWEEP_PLAIN_OP_REQUIRED)
true;
#undef ATTNSWEEP_PLAIN_OP_REQUIRED

// The composite ops of a model backend: where the backends differ in how, not in what.
// Each row names the op sequence the op stands for, which is what a device backend runs
// (CudaBackend, worker/model/backend_cuda.cpp); the CPU runs its fused version, the same
// values (CpuBackend, below and backend.cpp). Each row of the X-macro
// ATTNSWEEP_COMPOSITE_OPS(X), X(return type, name, (params)), is the op's one signature:
// from it come each backend's member declaration and the op's requirement in the concept
// ModelBackend (ModelBackendComposites below); each backend defines the members.
// Not here, because their parameters or their kind differ by backend: readout_together
// (a vector of the backend's own type) and the static layer_buffers.
#define ATTNSWEEP_COMPOSITE_OPS(X)                                                                                    \
  /* The attention on split heads (kernels/attention.h): q (B, H, Nq, d), k (B, H, Nk, d), v (B, H, Nk, dv),          \
     key_mask (B, Nk) or null (padding); o (B, H, Nq, dv), lse (B, H, Nq), attn_fro and jac_fro (B, H) or null. The   \
     CPU's kernel, or CUDA's fused kernels (the materialising path where they have no specialisation; with precision  \
     bf16 on bfloat16 copies), float32 in and out either way. */                                                      \
  X(void, attention_forward,                                                                                          \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* q, const float* k, const float* v,          \
     const float* key_mask, float* o, float* lse, double* attn_fro, double* jac_fro))                                 \
  /* Its backward: dq, dk, dv (the shapes of q, k, v) from o, dout (the shape of o) and lse. */                       \
  X(void, attention_backward,                                                                                         \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* q, const float* k, const float* v,          \
     const float* key_mask, const float* o, const float* dout, const float* lse, float* dq, float* dk, float* dv))    \
  /* out = inp @ weight^T + bias + resid (matmul_forward then residual_forward(out, out, resid));                     \
     the CPU finishes each block of rows while it is in cache. */                                                     \
  X(void, matmul_residual_forward,                                                                                    \
    (float* out, const float* inp, const float* weight, const float* bias, const float* resid, int64_t N, int64_t C,  \
     int64_t OC))                                                                                                     \
  /* pre = inp @ weight^T + bias, out = gelu(pre) (matmul_forward then gelu_forward). */                              \
  X(void, matmul_gelu_forward,                                                                                        \
    (float* pre, float* out, const float* inp, const float* weight, const float* bias, int64_t N, int64_t C,          \
     int64_t OC))                                                                                                     \
  /* dinp OVERWRITTEN = dout @ weight, dweight, dbias added (zero(dinp) then matmul_backward), without the            \
     zero-fill pass on the CPU. */                                                                                    \
  X(void, matmul_backward_overwrite,                                                                                  \
    (float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight, int64_t N,  \
     int64_t C, int64_t OC))                                                                                          \
  /* The backward of the matmul after a GELU (inp = gelu(pre)), through the GELU: dpre (N, C) OVERWRITTEN =           \
     gelu'(pre) * (dout @ weight); dweight, dbias added. The unfused sequence is zero(dgelu),                         \
     matmul_backward(dgelu, ...), zero(dpre), gelu_backward(dpre, pre, dgelu) with dgelu (N, C) scratch               \
     (LayerBuffers::gelu_grad); the CPU needs none (null). */                                                         \
  X(void, gelu_matmul_backward,                                                                                       \
    (float* dpre, float* dgelu, float* dweight, float* dbias, const float* dout, const float* inp, const float* pre,  \
     const float* weight, int64_t N, int64_t C, int64_t OC))                                                          \
  /* A transformer layer's attention on its fused projection qkv (B, T, 3C), shape (B, H, T, T, hd, hd), key_mask     \
     (B, T) or null: the output as rows atty (B, T, C), heads side by side; lse (B, H, T); attn_fro, jac_fro (B, H).  \
     The unfused sequence is split_heads(qkv -> heads.q, k, v), attention_forward(... -> heads.o),                    \
     heads_to_rows(heads.o -> atty); the CPU takes the packed path instead where it can                               \
     (kernels/attention.h attention_packed_cpu_usable, no key mask; heads unused, null). With a key mask, the norms   \
     count the rows of real queries only (kernels/real_query_norms.h). */                                             \
  X(void, attention_block_forward,                                                                                    \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask, const float* qkv,                 \
     const HeadBuffers& heads, float* atty, float* lse, double* attn_fro, double* jac_fro))                           \
  /* Its backward from datty (B, T, C): dqkv (B, T, 3C) OVERWRITTEN. The unfused sequence is                          \
     rows_to_heads(datty -> dheads.o), attention_backward(-> dheads.q, k, v), merge_heads. */                         \
  X(void, attention_block_backward,                                                                                   \
    (const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask, const float* qkv,                 \
     const HeadBuffers& heads, const float* atty, const float* lse, const float* datty, const HeadBuffers& dheads,    \
     float* dqkv))                                                                                                    \
  /* The whole layer at once (CPU: kernels/ops.h layer_forward_fused_cpu / layer_backward_fused_cpu, per block of     \
     samples, when it is usable there and nothing is masked; a device: never): returns whether it ran (the model runs \
     the op sequence otherwise). The CPU does not keep the GELU's output (a.fch_gelu ignored): its backward           \
     recomputes it. */                                                                                                \
  X(bool, layer_forward_fused,                                                                                        \
    (const AttentionSpec& spec, const AttentionShape& shape, int64_t F, const float* key_mask,                        \
     const LayerForwardArgs& a))                                                                                      \
  X(bool, layer_backward_fused,                                                                                       \
    (const AttentionSpec& spec, const AttentionShape& shape, int64_t F, const float* key_mask,                        \
     const LayerBackwardArgs& a))                                                                                     \
  /* The read-out head's forward (and, train, backward) in its own algebra (kernels/readout.h on the CPU,             \
     kernels/readout_cuda.h on CUDA; x [B, N, C], y [B]) instead of the op sequence of worker/model/model_impl.h's    \
     forward_readout / backward_readout, unless switched off (readout_algebra_enabled) or the device does not take    \
     the shape: returns whether it ran. */                                                                            \
  X(bool, readout_fused,                                                                                              \
    (const ReadoutShape& shape, const float* x, const float* y, ReadoutCell& cell, bool train, bool norms))

// A composite's member declaration: each backend declares its composites with
// ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_DECLARE_COMPOSITE) in its class.
#define ATTNSWEEP_DECLARE_COMPOSITE(ret, name, params) ret name params;

// The composites' part of ModelBackend, from the composite list
// (ATTNSWEEP_COMPOSITE_OPS above): B has a member `name` callable with the row's parameters
// that returns the row's type.
namespace composite_signature {
#define ATTNSWEEP_COMPOSITE_SIGNATURE(ret, name, params) using name = ret params;
ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_COMPOSITE_SIGNATURE)
#undef ATTNSWEEP_COMPOSITE_SIGNATURE
}  // namespace composite_signature
#define ATTNSWEEP_COMPOSITE_CALLABLE(ret, name, params)                               \
  template <class Be, class Signature>                                                \
  constexpr bool composite_callable_##name = false;                                   \
  template <class Be, class R, class... P>                                            \
  constexpr bool composite_callable_##name<Be, R(P...)> = requires(Be & be, P... p) { \
    { be.name(p...) } -> std::same_as<R>;                                             \
  };
ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_COMPOSITE_CALLABLE)
#undef ATTNSWEEP_COMPOSITE_CALLABLE
#define ATTNSWEEP_COMPOSITE_REQUIRED(ret, name, params) composite_callable_##name<B, composite_signature::name>&&
template <class B>
concept ModelBackendComposites = ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_COMPOSITE_REQUIRED)
true;
#undef ATTNSWEEP_COMPOSITE_REQUIRED

// What BasicModel (worker/model/model.h) and BasicTrainer (worker/training/trainer.h) call on a backend.
// Shapes and semantics of the plain ops: kernels/op_list.h; of the others: kernels/ops.h,
// kernels/model_ops.h, kernels/attention.h; of the composites: CpuBackend below.
template <class B>
concept ModelBackend = ModelBackendPlainOps<B> &&
    requires(B& be, typename B::template Array<float>& fa, typename B::template Array<double>& da, float* f,
             const float* cf, double* d, const double* cd, const int32_t* ci, int64_t* ni, int64_t n, float s,
             bool flag, std::vector<float>& host, const AttentionSpec& spec, const AttentionShape& shape,
             const LayerForwardArgs& lfa, const LayerBackwardArgs& lba, const HeadBuffers& hb,
             const std::vector<B*>& replicas, typename B::Collective& coll, const std::vector<float*>& grads,
             const ReadoutShape& rs, ReadoutCell& rc, std::vector<ReadoutCell>& rcs, const StepGraphArgs& sga,
             const ModelConfig& mc) {
  // buffers and device
  { B::kEveryReplicaUpdates } -> std::convertible_to<bool>;
  { B::kPadding } -> std::convertible_to<bool>;
  { B::kPrefetchBatches } -> std::convertible_to<bool>;
  { fa.data() } -> std::same_as<float*>;
  { da.data() } -> std::same_as<double*>;
  be.allocate(fa, n);
  be.allocate(da, n);
  be.set_precision(Precision::fp32);
  be.reserve(mc, n);
  be.bind();
  be.synchronize();
  be.zero(f, n);
  be.upload(f, cf, n);
  be.download(f, cf, n);
  { be.input(kInputX, cf, n) } -> std::same_as<const float*>;
  { be.input(kInputIds, ci, n) } -> std::same_as<const int32_t*>;
  { be.fills_batches() } -> std::convertible_to<bool>;
  { be.fill_batch(ni, n, n, n) } -> std::same_as<std::pair<const float*, const float*>>;
  { be.to_host(cd, n) } -> std::same_as<const double*>;
  { be.host_view(cf, n, host) } -> std::same_as<const float*>;
  // the ops outside the op list (its plain ops: ModelBackendPlainOps)
  { be.softmax_crossentropy_forward(f, ni, cf, ci, n, n) } -> std::convertible_to<double>;
  { be.mse_forward(cf, cf, n) } -> std::convertible_to<double>;
  be.clip_gradients(f, n, 1.0);
  be.adamw_update(f, cf, f, f, n, s, s, s, s, s, n);
  be.sgd_update(f, cf, f, n, s, s, s);
  {
    be.graphed_step(n, sga, [] {})
    } -> std::same_as<std::optional<GraphedStep>>;
  { be.graphed_steps() } -> std::convertible_to<int64_t>;
  { be.global_norm(cf, n) } -> std::convertible_to<double>;
  // the composites outside the composite list (its ops: ModelBackendComposites)
  { be.layer_buffers(spec, shape, n, flag) } -> std::same_as<LayerBuffers>;
  { be.readout_together(replicas, rs, cf, cf, rcs, flag) } -> std::same_as<bool>;
  // replicas
  B::for_each_replica(n, [](int64_t) {});
  {typename B::Collective(replicas)};
  coll.allreduce_mean(grads, n);
};

// A member that forwards to the free function of the same name (params: the op list's
// row, unused here).
#define ATTNSWEEP_CPU_OP(name, ...) \
  template <class... A>             \
  auto name(A... a) {               \
    return ::attnsweep::name(a...); \
  }

class CpuBackend {
 public:
  static constexpr bool kEveryReplicaUpdates = false;
  static constexpr bool kPadding = true;
  static constexpr bool kPrefetchBatches = false;
  template <class T>
  using Array = std::vector<T>;

  explicit CpuBackend(int /*device*/ = 0) {}
  // fp32 only: bf16 and tf32 are GPU arithmetic (kernels/precision.h). Every attempt
  // would fail alike: the cell fails once, without its retries.
  void set_precision(Precision p) {
    if (p != Precision::fp32)
      throw DeterministicError(std::string("precision \"") + precision_name(p) +
                               "\": the CPU trains in fp32 only; bf16 and tf32 need a CUDA device (--device cuda)");
  }
  // Nothing beside the model's own buffers (the CPU's scratch is per call).
  void reserve(const ModelConfig&, int64_t) {}
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
  // The CPU makes every batch on the host (the task's fill): never asked to.
  bool fills_batches() const { return false; }
  std::pair<const float*, const float*> fill_batch(const int64_t*, int64_t, int64_t, int64_t) {
    throw std::logic_error("CpuBackend: batches are made on the host");
  }
  const double* to_host(const double* p, int64_t) { return p; }
  const float* host_view(const float* p, int64_t, std::vector<float>&) { return p; }

  // The plain ops (kernels/op_list.h), each an inline call of the free function.
  ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_CPU_OP, ATTNSWEEP_CPU_OP)
  // Plain forwards here too, but not on CUDA (host values, or a step graph's device
  // scalars there): so not in the list.
  ATTNSWEEP_CPU_OP(softmax_crossentropy_forward)
  ATTNSWEEP_CPU_OP(mse_forward)
  ATTNSWEEP_CPU_OP(global_norm)
  ATTNSWEEP_CPU_OP(adamw_update)
  ATTNSWEEP_CPU_OP(sgd_update)
  void clip_gradients(float* g, int64_t n, double coef) {
    if (coef < 1.0) scale_inplace(g, n, static_cast<float>(coef));
  }
  // Every step op by op.
  template <class Body>
  std::optional<GraphedStep> graphed_step(int64_t, const StepGraphArgs&, Body&&) {
    return std::nullopt;
  }
  int64_t graphed_steps() const { return 0; }

  // ---- composites (ATTNSWEEP_COMPOSITE_OPS above): on the CPU, the fused versions of
  // kernels/ops.h; defined below and in backend.cpp ----
  ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_DECLARE_COMPOSITE)
  // Several models' read-outs on one batch (BasicModel::readout_together): cells[k] of
  // backends[k] (backends[0] this one), trained in one call of kernels/readout.h; false
  // when the algebra is switched off. Each cell's loss is set.
  bool readout_together(const std::vector<CpuBackend*>& /*backends*/, const ReadoutShape& shape, const float* x,
                        const float* y, std::vector<ReadoutCell>& cells, bool norms) {
    if (!readout_algebra_enabled()) return false;
    readout_train_cpu(shape, x, y, cells, norms);
    return true;
  }
  // The buffers the three CPU paths use: the fused layer none of them; the packed
  // attention no split heads and no dgelu; the split-heads fallback no dgelu.
  static LayerBuffers layer_buffers(const AttentionSpec& spec, const AttentionShape& shape, int64_t F, bool masked);

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

// The composites that are one call of a fused CPU function (the others: backend.cpp).
inline void CpuBackend::matmul_residual_forward(float* out, const float* inp, const float* weight, const float* bias,
                                                const float* resid, int64_t N, int64_t C, int64_t OC) {
  ::attnsweep::matmul_residual_forward(out, inp, weight, bias, resid, N, C, OC);
}
inline void CpuBackend::matmul_gelu_forward(float* pre, float* out, const float* inp, const float* weight,
                                            const float* bias, int64_t N, int64_t C, int64_t OC) {
  ::attnsweep::matmul_gelu_forward(pre, out, inp, weight, bias, N, C, OC);
}
inline void CpuBackend::matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout,
                                                  const float* inp, const float* weight, int64_t N, int64_t C,
                                                  int64_t OC) {
  ::attnsweep::matmul_backward_overwrite(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}
// dgelu unused: the CPU's fused backward needs no scratch (null).
inline void CpuBackend::gelu_matmul_backward(float* dpre, float* /*dgelu*/, float* dweight, float* dbias,
                                             const float* dout, const float* inp, const float* pre, const float* weight,
                                             int64_t N, int64_t C, int64_t OC) {
  ::attnsweep::gelu_matmul_backward(dpre, dweight, dbias, dout, inp, pre, weight, N, C, OC);
}
inline bool CpuBackend::readout_fused(const ReadoutShape& shape, const float* x, const float* y, ReadoutCell& cell,
                                      bool train, bool norms) {
  if (!readout_algebra_enabled()) return false;
  (train ? readout_train_cpu : readout_forward_cpu)(shape, x, y, std::span<ReadoutCell>(&cell, 1), norms);
  return true;
}

static_assert(ModelBackend<CpuBackend>);

}  // namespace attnsweep
