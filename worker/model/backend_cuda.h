// The CUDA backend of the model and trainer (the interface is described in
// worker/model/backend.h): the *_cuda ops of kernels/ops_cuda.h and kernels/model_ops_cuda.h
// on one device, with one stream and one workspace (cuBLAS handle + scratch) per backend,
// i.e. per model replica. Buffers are cudaMalloc'ed when a model is built or first sees
// a larger batch, never per step; batch inputs go host -> pinned staging -> device on the
// stream; norms come back only when asked (to_host). The composite ops are the unfused
// op sequences they stand for (backend_cuda.cpp). Only with ATTNSWEEP_HAVE_CUDA.
#pragma once

#ifdef ATTNSWEEP_HAVE_CUDA

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/attention_cuda.h"
#include "kernels/collective_cuda.h"
#include "kernels/model_ops_cuda.h"
#include "kernels/op_list.h"
#include "kernels/ops_cuda.h"
#include "kernels/readout_cuda.h"
#include "worker/model/backend.h"
#include "worker/model/device_memory.h"

namespace attnsweep {

// Throws std::runtime_error naming `what` when err is not cudaSuccess.
void cuda_check(cudaError_t err, const char* what);

// Owns n elements of T on one device (cudaMalloc; freed with that device current).
class DeviceBytes {
 public:
  DeviceBytes() = default;
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  DeviceBytes(DeviceBytes&& o) noexcept { *this = std::move(o); }
  DeviceBytes& operator=(DeviceBytes&& o) noexcept;
  ~DeviceBytes() { release(); }
  // Zero-filled, on `device`; the old contents are dropped.
  void assign(int device, size_t bytes);
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void release() noexcept;
  void* p_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

template <class T>
class DeviceArray {
 public:
  T* data() { return static_cast<T*>(mem_.get()); }
  const T* data() const { return static_cast<const T*>(mem_.get()); }
  size_t size() const { return mem_.bytes() / sizeof(T); }
  void assign(int device, int64_t n) { mem_.assign(device, static_cast<size_t>(n) * sizeof(T)); }

 private:
  DeviceBytes mem_;
};

// Each op: skipped while staging a graph's inputs (begin_staging), timed when asked.
#define ATTNSWEEP_CUDA_OP(name, ...)                                           \
  template <class... A>                                                        \
  auto name(A... a) {                                                          \
    if (mode_ == Mode::staging) return decltype(name##_cuda(a..., stream_))(); \
    const OpTimer timed(this);                                                 \
    return ::attnsweep::name##_cuda(a..., stream_);                            \
  }
#define ATTNSWEEP_CUDA_OP_WS(name, ...)                                             \
  template <class... A>                                                             \
  auto name(A... a) {                                                               \
    if (mode_ == Mode::staging) return decltype(name##_cuda(a..., ws_, stream_))(); \
    const OpTimer timed(this);                                                      \
    return ::attnsweep::name##_cuda(a..., ws_, stream_);                            \
  }

class CudaBackend {
 public:
  static constexpr bool kEveryReplicaUpdates = true;
  static constexpr bool kPadding = true;

  static constexpr bool kPrefetchBatches =
      true;  // the host makes batch t + 1 during step t (worker/training/prefetch.h)
  template <class T>
  using Array = DeviceArray<T>;

  explicit CudaBackend(int device = 0);
  ~CudaBackend();
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // fp32 (the default), tf32 or bf16 (kernels/precision.h): the matmul ops through the
  // workspace (ops_cuda.h); with bf16, attention_forward / _backward round Q, K, V, O
  // and dO to bfloat16 and run the fused kernels in bf16 where they have the head width
  // (attention_cuda_fused_supported), else in float32.
  void set_precision(Precision p);
  Precision precision() const { return precision_; }
  // Allocates the backend's own buffers for a batch of B rows of this model, as
  // worker/model/device_memory.h declares them (staged inputs, a device-made batch, the
  // bf16 copies and query rows' scratch, the workspace), so a step grows none of them.
  void reserve(const ModelConfig& cfg, int64_t B);
  // Buffers grown after reserve because a request exceeded the declared plan (the
  // workspace's bf16 matmul copies, grown on demand, count too): 0 when the plan holds.
  int64_t unplanned_growths() const;
  std::string unplanned_buffers() const;  // which, with the bytes asked and reserved
  void bind();
  void synchronize();
  template <class T>
  void allocate(DeviceArray<T>& a, int64_t n) {
    a.assign(device_, n);
    ++epoch_;
  }
  void zero(float* p, int64_t n);
  void upload(float* dst, const float* host, int64_t n);    // synchronous
  void download(float* host, const float* src, int64_t n);  // synchronous
  // Device copy of n elements at host (null: null), through pinned staging, queued on the
  // stream; valid until the next input() of the same slot.
  template <class T>
  const T* input(InputSlot slot, const T* host, int64_t n) {
    return static_cast<const T*>(input_bytes(slot, host, static_cast<size_t>(n) * sizeof(T)));
  }
  // Training batches made on this device from their sample indices (the task's
  // TrainingData::fill_device; empty: off, the host makes them): the ModelBackend contract
  // (worker/model/backend.h). fill_batch's buffers are valid until the next fill_batch.
  using BatchFill = std::function<void(const int64_t* idx, int64_t count, float* x, float* y_value, void* stream)>;
  void set_batch_fill(BatchFill fill) { fill_ = std::move(fill); }
  bool fills_batches() const { return static_cast<bool>(fill_); }
  std::pair<const float*, const float*> fill_batch(const int64_t* idx, int64_t B, int64_t x_n, int64_t y_n);
  // Waits for the stream, then copies n doubles back; valid until the next to_host().
  const double* to_host(const double* p, int64_t n);
  // Downloads n floats into buf (synchronous) and returns buf.data().
  const float* host_view(const float* p, int64_t n, std::vector<float>& buf);

  // The plain ops (kernels/op_list.h): name(args...) is name_cuda(args..., stream), or
  // name_cuda(args..., ws_, stream) for those of the list's second kind.
  ATTNSWEEP_PLAIN_OPS(ATTNSWEEP_CUDA_OP, ATTNSWEEP_CUDA_OP_WS)

  // Kernel time, for bench/: with time_kernels(true) every op above records a CUDA event
  // before and after its work on the stream; take_kernel_ms() waits for the stream and
  // returns the summed time inside the ops since the last call (the step's kernel time,
  // next to its wall time: the difference is the host's).
  void time_kernels(bool on) { timing_ = on; }
  double take_kernel_ms();

  // The two losses and the global norm return host values, which synchronises; inside a
  // step graph (capture or staging) they leave them in the step's scalars on the device
  // instead and return NaN (the trainer reads step_scalars() after the step).
  double softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits, const int32_t* targets,
                                      int64_t N, int64_t V);
  double mse_forward(const float* pred, const float* target, int64_t n);
  double global_norm(const float* g, int64_t n);

  // ---- launch-free steps ----------------------------------------------------------------
  // A training step that does not log, as one CUDA graph (ModelBackend::graphed_step):
  // body is the step's host code (forward, backward, global norm, the trainer's update).
  // The first step at a batch size runs op by op (std::nullopt: it sizes every buffer and
  // scratch); the second runs body with the ops recorded on the stream, not run, and
  // instantiates the graph; each later one runs body with every op skipped (the batch
  // inputs copied into the pinned staging buffers the graph's copies read) and replays
  // the graph. The graph holds device addresses: it is captured again when a buffer of
  // this backend or its workspace was reallocated since (allocation_epoch). A failed
  // capture makes every later step of this backend run op by op (a note on stderr).
  template <class Body>
  std::optional<GraphedStep> graphed_step(int64_t B, const StepGraphArgs& a, Body&& body);
  int64_t graphed_steps() const { return graphed_steps_; }

  // The optimiser's ops (ModelBackend). Op by op: the host's coef, lr and step; inside a
  // step graph: the clip decided on the device (clip_decision_cuda) and lr / bias
  // corrections / finiteness from the step's scalars (the arguments lr and t unused).
  void clip_gradients(float* g, int64_t n, double coef);
  void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2, float eps,
                    float wd, int64_t t);
  void sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd);

  // ---- composites (ATTNSWEEP_COMPOSITE_OPS, worker/model/backend.h): the unfused op sequences, in
  // backend_cuda.cpp; no fused layer (below: the model runs the op sequence). The read-out
  // head in its own algebra (kernels/readout_cuda.h) unless switched off or the shape is not
  // one it takes; in a step graph its loss goes to the step's scalars (as mse_forward's does).
  ATTNSWEEP_COMPOSITE_OPS(ATTNSWEEP_DECLARE_COMPOSITE)
  // Several models' read-outs on one batch (BasicModel::readout_together; a group of cells):
  // cells[k] of backends[k] (backends[0] this one, all on this device), in one
  // readout_cuda on this stream and workspace, after what each other backend's stream
  // queued before it (its gradients' zeroing) and before what they queue next. Each cell's
  // loss is set (the call waits for its stream). False where the algebra is switched off or
  // readout_cuda does not take the shape and count (then each model steps alone). Op by op
  // only: never inside a step graph.
  bool readout_together(const std::vector<CudaBackend*>& backends, const ReadoutShape& shape, const float* x,
                        const float* y, std::vector<ReadoutCell>& cells, bool norms);
  // The unfused sequence uses every buffer.
  static LayerBuffers layer_buffers(const AttentionSpec&, const AttentionShape&, int64_t, bool) { return {}; }

  // f(0) .. f(k-1) on k host threads at once (f(0) on the calling one); the first
  // exception, in replica order, is rethrown after all have finished.
  template <class F>
  static void for_each_replica(int64_t k, F&& f);

  // NCCL: every grads[r] (on replica r's device) becomes the sum over the replicas, then
  // is scaled by 1/k on its own stream; one communicator per replica, created once.
  class Collective {
   public:
    explicit Collective(const std::vector<CudaBackend*>& replicas);
    ~Collective();
    Collective(const Collective&) = delete;
    Collective& operator=(const Collective&) = delete;
    void allreduce_mean(const std::vector<float*>& grads, int64_t n);

   private:
    std::vector<CudaBackend*> replicas_;
    NcclComms* comms_ = nullptr;
  };

 private:
  const void* input_bytes(InputSlot slot, const void* host, size_t bytes);
  // With a key mask, on steps that collect norms: attn_fro / jac_fro (B, H) again from
  // each sample's real query rows (kernels/real_query_norms_cuda.h, with this backend's
  // attention_forward and scratch slots 8 and 9): the kernels mask keys, not queries.
  void norms_of_real_queries(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                             const HeadBuffers& heads, double* attn_fro, double* jac_fro);
  // Device scratch of at least `bytes` in slot i (grown, kept): the bf16 copies of the
  // attention's operands and the gathered query rows.
  void* scratch(int i, size_t bytes);
  // Slot i as n bfloat16s, holding src rounded to bfloat16 (queued) unless src is null.
  void* bf16_slot(int i, const float* src, int64_t n);

  // Records the event pair of one op when timing (time_kernels).
  class OpTimer {
   public:
    explicit OpTimer(CudaBackend* be) : be_(be->timing_ && be->mode_ == Mode::eager ? be : nullptr) {
      if (be_) slot_ = be_->op_begin();
    }
    ~OpTimer() {
      if (be_) be_->op_end(slot_);
    }
    OpTimer(const OpTimer&) = delete;
    OpTimer& operator=(const OpTimer&) = delete;

   private:
    CudaBackend* be_;
    size_t slot_ = 0;
  };
  size_t op_begin();
  void op_end(size_t slot);

  // The parts of graphed_step (backend_cuda.cpp).
  uint64_t allocation_epoch() const;
  void begin_capture();
  void end_capture();
  // After an exception between begin_capture and end_capture: ends the capture if one is
  // open, drops what it made, and clears the error; never throws.
  void abandon_capture() noexcept;
  void drop_step_graph();
  // The host's part of the step's scalars (lr, c1, c2, clip), then the graph; asynchronous.
  void launch_step_graph(float lr, double c1, double c2, double clip);
  // Waits for the stream; the scalars of the last graphed step.
  const CudaStepScalars& step_scalars();

  enum class Mode { eager, capture, staging };
  Mode mode_ = Mode::eager;
  // graphed_step: the batch size and allocation epoch of the graph and of the last op-by-op
  // step that warmed the buffers for a capture.
  int64_t graph_B_ = -1, warm_B_ = -1, graphed_steps_ = 0;
  uint64_t graph_epoch_ = 0, warm_epoch_ = 0;
  bool graphs_failed_ = false;
  CudaStepScalars* scalars_dev_ = nullptr;   // cudaMalloc'ed at the first graph
  CudaStepScalars* scalars_host_ = nullptr;  // pinned: the host's part in, the results out
  double loss_divisor_ = 1;
  cudaGraphExec_t graph_exec_ = nullptr;
  uint64_t epoch_ = 0;  // buffers (re)allocated by this backend (allocate, staging, scratch)

  int device_ = 0;
  Precision precision_ = Precision::fp32;
  bool timing_ = false;
  std::vector<cudaEvent_t> events_;  // pairs (before, after) of the timed ops
  size_t events_used_ = 0;
  static constexpr int kScratchSlots = BackendBuffers::kScratchSlots;
  DeviceBytes scratch_[kScratchSlots];
  // Since reserve: buffers grown past the plan, and the workspace's epoch at the reserve.
  bool reserved_ = false;
  int64_t unplanned_ = 0;
  std::string unplanned_what_;
  void note_unplanned(const std::string& what, size_t had, size_t asked);
  uint64_t ws_epoch_at_reserve_ = 0;

  cudaStream_t stream_ = nullptr;
  AttentionCudaWorkspace* ws_ = nullptr;
  struct Staging {
    DeviceBytes device;
    void* pinned = nullptr;  // cudaMallocHost
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // the last copy out of `pinned`
  };
  Staging inputs_[kNumInputSlots];
  // Grows a staging slot (device and pinned) to `bytes`; eager mode only.
  void grow_staging(Staging& s, size_t bytes);
  BatchFill fill_;
  cudaEvent_t order_ = nullptr;  // recorded on this stream for another backend's to wait on (wait_for)
  // This stream waits for what `other`'s stream has queued so far.
  void wait_for(CudaBackend& other);
  DeviceBytes made_[2];           // fill_batch's x and y_value
  void* host_doubles_ = nullptr;  // pinned, for to_host
  size_t host_doubles_bytes_ = 0;
};

#undef ATTNSWEEP_CUDA_OP
#undef ATTNSWEEP_CUDA_OP_WS

// No fused layer on CUDA: the model runs the op sequence.
inline bool CudaBackend::layer_forward_fused(const AttentionSpec&, const AttentionShape&, int64_t, const float*,
                                             const LayerForwardArgs&) {
  return false;
}
inline bool CudaBackend::layer_backward_fused(const AttentionSpec&, const AttentionShape&, int64_t, const float*,
                                              const LayerBackwardArgs&) {
  return false;
}

static_assert(ModelBackend<CudaBackend>);

template <class Body>
std::optional<GraphedStep> CudaBackend::graphed_step(int64_t B, const StepGraphArgs& a, Body&& body) {
  if (graphs_failed_) return std::nullopt;
  bind();
  const uint64_t epoch = allocation_epoch();
  if (!(graph_exec_ != nullptr && graph_B_ == B && graph_epoch_ == epoch)) {
    // Captured when the step before ran op by op at this batch size and nothing was
    // allocated since it began: then every buffer and scratch the step needs exists,
    // and the capture allocates nothing (it could not).
    if (!(warm_B_ == B && warm_epoch_ == epoch)) {
      warm_B_ = B;
      warm_epoch_ = epoch;
      return std::nullopt;
    }
    try {
      begin_capture();
      body();
      end_capture();
    } catch (const std::exception& e) {
      abandon_capture();
      graphs_failed_ = true;
      std::fprintf(stderr, "attnsweep: CUDA graph capture failed (%s); the steps of this cell launch op by op\n",
                   e.what());
      return std::nullopt;
    }
    graph_B_ = B;
    graph_epoch_ = allocation_epoch();
  } else {
    mode_ = Mode::staging;
    try {
      body();
    } catch (...) {
      mode_ = Mode::eager;
      throw;
    }
    mode_ = Mode::eager;
  }
  double c1 = 0, c2 = 0;
  adamw_bias_corrections(a.beta1, a.beta2, a.t1, &c1, &c2);
  launch_step_graph(static_cast<float>(a.lr), c1, c2, a.clip);
  const CudaStepScalars& s = step_scalars();
  ++graphed_steps_;
  return GraphedStep{s.loss.sum / loss_divisor_, static_cast<int64_t>(s.loss.count), std::sqrt(s.grad_sq.sum)};
}

template <class F>
void CudaBackend::for_each_replica(int64_t k, F&& f) {
  std::vector<std::exception_ptr> err(static_cast<size_t>(k));
  auto run = [&](int64_t r) {
    try {
      f(r);
    } catch (...) {
      err[static_cast<size_t>(r)] = std::current_exception();
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(k > 0 ? k - 1 : 0));
  for (int64_t r = 1; r < k; ++r) threads.emplace_back(run, r);
  if (k > 0) run(0);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : err)
    if (e) std::rethrow_exception(e);
}

}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
