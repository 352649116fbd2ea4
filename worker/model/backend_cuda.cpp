// CudaBackend (worker/model/backend_cuda.h): buffers, staging, the composite ops (the unfused
// sequences) and the NCCL collective. The plain ops are the inline forwards in the header.
// About 630 lines: the one class that owns the CUDA model's device memory, stream and
// step graph; its composite ops and collective use that state and no other file may.
#ifdef ATTNSWEEP_HAVE_CUDA

#include "worker/model/backend_cuda.h"

#include "kernels/real_query_norms_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace attnsweep {

void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                             cudaGetErrorString(err) + ")");
}

namespace {

// Makes `device` current for the scope and restores the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceScope() {
    if (saved_ >= 0) cudaSetDevice(saved_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int saved_ = -1;
};

// Element counts of attention's Q, K, V and O.
struct OperandSizes {
  int64_t q, k, v, o;
};
OperandSizes operand_sizes(const AttentionShape& s) {
  const int64_t BH = s.B * s.H;
  return {BH * s.Nq * s.d, BH * s.Nk * s.d, BH * s.Nk * s.dv, BH * s.Nq * s.dv};
}

}  // namespace

// ---- device memory ------------------------------------------------------------------

DeviceBytes& DeviceBytes::operator=(DeviceBytes&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void DeviceBytes::assign(int device, size_t bytes) {
  release();
  if (bytes == 0) return;
  DeviceScope on(device);
  cuda_check(cudaMalloc(&p_, bytes), "cudaMalloc");
  bytes_ = bytes;
  device_ = device;
  // The legacy stream does not order against the backends' non-blocking streams: wait
  // for the fill here (allocations happen at set-up, not per step).
  cuda_check(cudaMemset(p_, 0, bytes), "cudaMemset");
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void DeviceBytes::release() noexcept {
  if (!p_) return;
  int saved = -1;
  if (cudaGetDevice(&saved) == cudaSuccess && saved != device_) cudaSetDevice(device_);
  cudaFree(p_);  // no throw from a destructor path
  if (saved >= 0 && saved != device_) cudaSetDevice(saved);
  p_ = nullptr;
  bytes_ = 0;
}

// ---- the backend ----------------------------------------------------------------------

CudaBackend::CudaBackend(int device) : device_(device) {
  cuda_check(cudaSetDevice(device), ("cudaSetDevice(" + std::to_string(device) + ")").c_str());
  cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  ws_ = attention_cuda_workspace_create();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  if (scalars_dev_) cudaFree(scalars_dev_);
  if (scalars_host_) cudaFreeHost(scalars_host_);
  for (Staging& s : inputs_) {
    if (s.pinned) cudaFreeHost(s.pinned);
    if (s.copied) cudaEventDestroy(s.copied);
  }
  if (host_doubles_) cudaFreeHost(host_doubles_);
  attention_cuda_workspace_destroy(ws_);
  if (order_) cudaEventDestroy(order_);
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaBackend::set_precision(Precision p) {
  bind();
  cuda_workspace_set_precision(ws_, p);
  precision_ = p;
}

void CudaBackend::bind() {
  cuda_check(cudaSetDevice(device_), "cudaSetDevice");
}

void CudaBackend::synchronize() {
  cuda_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void CudaBackend::zero(float* p, int64_t n) {
  if (mode_ == Mode::staging) return;
  const OpTimer timed(this);
  if (n > 0) cuda_check(cudaMemsetAsync(p, 0, static_cast<size_t>(n) * sizeof(float), stream_), "cudaMemsetAsync");
}

void CudaBackend::upload(float* dst, const float* host, int64_t n) {
  if (n <= 0) return;
  bind();
  cuda_check(cudaMemcpyAsync(dst, host, static_cast<size_t>(n) * sizeof(float), cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync (to device)");
  synchronize();
}

void CudaBackend::download(float* host, const float* src, int64_t n) {
  if (n <= 0) return;
  bind();
  cuda_check(cudaMemcpyAsync(host, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync (to host)");
  synchronize();
}

void CudaBackend::grow_staging(Staging& s, size_t bytes) {
  ++epoch_;
  synchronize();
  if (s.pinned) cuda_check(cudaFreeHost(s.pinned), "cudaFreeHost");
  s.pinned = nullptr;
  s.bytes = 0;
  cuda_check(cudaMallocHost(&s.pinned, bytes), "cudaMallocHost");
  s.device.assign(device_, bytes);
  s.bytes = bytes;
  if (!s.copied) cuda_check(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), "cudaEventCreate");
}

void CudaBackend::reserve(const ModelConfig& cfg, int64_t B) {
  bind();
  reserved_ = false;  // what grows here is the plan
  const BackendBuffers b = backend_buffers(cfg, B);
  for (int i = 0; i < kNumInputSlots; ++i)
    if (static_cast<size_t>(b.input[i]) > inputs_[i].bytes) grow_staging(inputs_[i], static_cast<size_t>(b.input[i]));
  for (int i = 0; i < 2; ++i)
    if (static_cast<size_t>(b.made[i]) > made_[i].bytes()) {
      ++epoch_;
      synchronize();
      made_[i].assign(device_, static_cast<size_t>(b.made[i]));
    }
  for (int i = 0; i < kScratchSlots; ++i)
    if (b.scratch[i] > 0) scratch(i, static_cast<size_t>(b.scratch[i]));
  attention_cuda_workspace_reserve(ws_, static_cast<size_t>(b.workspace_request));
  reserved_ = true;
  ws_epoch_at_reserve_ = attention_cuda_workspace_epoch(ws_);
}

void CudaBackend::note_unplanned(const std::string& what, size_t had, size_t asked) {
  ++unplanned_;
  unplanned_what_ += (unplanned_what_.empty() ? "" : "; ") + what + ": " + std::to_string(asked) + " bytes asked, " +
                     std::to_string(had) + " reserved";
}

int64_t CudaBackend::unplanned_growths() const {
  return unplanned_ +
         (reserved_ ? static_cast<int64_t>(attention_cuda_workspace_epoch(ws_) - ws_epoch_at_reserve_) : 0);
}

std::string CudaBackend::unplanned_buffers() const {
  std::string s = unplanned_what_;
  if (reserved_ && attention_cuda_workspace_epoch(ws_) != ws_epoch_at_reserve_)
    s += (s.empty() ? "" : "; ") + std::string("the workspace grew past its planned request");
  return s;
}

const void* CudaBackend::input_bytes(InputSlot slot, const void* host, size_t bytes) {
  if (host == nullptr) return nullptr;
  Staging& s = inputs_[slot];
  if (mode_ != Mode::eager) {
    // A step graph's copy reads the pinned buffer when it is replayed: fill it (the step
    // before has finished: a graphed step waits at its end). Never grow inside a graph.
    if (bytes > s.bytes) throw std::logic_error("CudaBackend: a batch input grew inside a step graph");
    if (bytes > 0) std::memcpy(s.pinned, host, bytes);
    if (mode_ == Mode::capture && bytes > 0)
      cuda_check(cudaMemcpyAsync(s.device.get(), s.pinned, bytes, cudaMemcpyHostToDevice, stream_),
                 "cudaMemcpyAsync (batch to device, captured)");
    return s.device.get();
  }
  if (bytes > s.bytes) {  // larger than reserved (a batch without ensure_batch): grow, outside the steady state
    if (reserved_) note_unplanned("input slot " + std::to_string(slot), s.bytes, bytes);
    grow_staging(s, bytes);
  } else if (s.copied) {
    // The previous copy out of the pinned buffer must be done before it is overwritten
    // (it was queued at the start of the previous forward: long finished in practice).
    cuda_check(cudaEventSynchronize(s.copied), "cudaEventSynchronize");
  }
  if (bytes == 0) return s.device.get();
  std::memcpy(s.pinned, host, bytes);
  cuda_check(cudaMemcpyAsync(s.device.get(), s.pinned, bytes, cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync (batch to device)");
  cuda_check(cudaEventRecord(s.copied, stream_), "cudaEventRecord");
  return s.device.get();
}

std::pair<const float*, const float*> CudaBackend::fill_batch(const int64_t* idx, int64_t B, int64_t x_n, int64_t y_n) {
  if (!fill_) throw std::logic_error("CudaBackend::fill_batch: no batch fill was set");
  const int64_t* idx_dev = input(kInputSampleIds, idx, B);  // staged and, in a step graph, copied like any input
  const int64_t n[2] = {x_n, y_n};
  for (int i = 0; i < 2; ++i) {
    const size_t bytes = static_cast<size_t>(n[i]) * sizeof(float);
    if (bytes <= made_[i].bytes()) continue;
    if (mode_ != Mode::eager) throw std::logic_error("CudaBackend: a device-made batch grew inside a step graph");
    if (reserved_) note_unplanned("device-made batch " + std::to_string(i), made_[i].bytes(), bytes);
    ++epoch_;
    synchronize();
    made_[i].assign(device_, bytes);
  }
  float* x = static_cast<float*>(made_[0].get());
  float* y = static_cast<float*>(made_[1].get());
  if (mode_ != Mode::staging) {  // staging a graph's replay: its kernel is in the graph
    const OpTimer timed(this);
    fill_(idx_dev, B, x, y, stream_);
  }
  return {x, y};
}

const double* CudaBackend::to_host(const double* p, int64_t n) {
  const size_t bytes = static_cast<size_t>(n) * sizeof(double);
  if (bytes > host_doubles_bytes_) {
    synchronize();
    if (host_doubles_) cuda_check(cudaFreeHost(host_doubles_), "cudaFreeHost");
    host_doubles_ = nullptr;
    host_doubles_bytes_ = 0;
    cuda_check(cudaMallocHost(&host_doubles_, bytes), "cudaMallocHost");
    host_doubles_bytes_ = bytes;
  }
  if (bytes > 0)
    cuda_check(cudaMemcpyAsync(host_doubles_, p, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync (norms)");
  synchronize();
  return static_cast<const double*>(host_doubles_);
}

const float* CudaBackend::host_view(const float* p, int64_t n, std::vector<float>& buf) {
  buf.resize(static_cast<size_t>(n));
  download(buf.data(), p, n);
  return buf.data();
}

void* CudaBackend::scratch(int i, size_t bytes) {
  DeviceBytes& d = scratch_[i];
  if (bytes > d.bytes()) {
    if (mode_ != Mode::eager) throw std::logic_error("CudaBackend: scratch grew inside a step graph");
    if (reserved_) note_unplanned("scratch slot " + std::to_string(i), d.bytes(), bytes);
    d.assign(device_, static_cast<size_t>(BackendBuffers::grown(static_cast<int64_t>(bytes))));  // zero-filled; waits
    ++epoch_;
  }
  return d.get();
}

void* CudaBackend::bf16_slot(int i, const float* src, int64_t n) {
  void* dst = scratch(i, static_cast<size_t>(n) * 2);  // 2 bytes a bfloat16
  if (src != nullptr) f32_to_bf16_cuda(dst, src, n, stream_);
  return dst;
}

// ---- kernel timing ------------------------------------------------------------------------

size_t CudaBackend::op_begin() {
  if (events_used_ + 2 > events_.size()) {
    for (int i = 0; i < 2; ++i) {
      cudaEvent_t e = nullptr;
      cuda_check(cudaEventCreate(&e), "cudaEventCreate");
      events_.push_back(e);
    }
  }
  const size_t slot = events_used_;
  events_used_ += 2;
  cuda_check(cudaEventRecord(events_[slot], stream_), "cudaEventRecord");
  return slot;
}

void CudaBackend::op_end(size_t slot) {
  cudaEventRecord(events_[slot + 1], stream_);  // from a destructor: no throw
}

double CudaBackend::take_kernel_ms() {
  synchronize();
  double total = 0;
  for (size_t i = 0; i + 1 < events_used_; i += 2) {
    float ms = 0;
    cuda_check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
    total += ms;
  }
  events_used_ = 0;
  return total;
}

// ---- losses and the global norm: host values, or the step's device scalars -----------------

double CudaBackend::softmax_crossentropy_forward(float* probs, int64_t* n_correct, const float* logits,
                                                 const int32_t* targets, int64_t N, int64_t V) {
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    return softmax_crossentropy_forward_cuda(probs, n_correct, logits, targets, N, V, ws_, stream_);
  }
  loss_divisor_ = static_cast<double>(N);
  if (n_correct != nullptr) *n_correct = 0;  // in step_scalars().loss.count
  if (mode_ == Mode::capture)
    softmax_crossentropy_sum_cuda(probs, logits, targets, N, V, &scalars_dev_->loss, ws_, stream_);
  return std::nan("");
}

double CudaBackend::mse_forward(const float* pred, const float* target, int64_t n) {
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    return mse_forward_cuda(pred, target, n, ws_, stream_);
  }
  loss_divisor_ = static_cast<double>(n);
  if (mode_ == Mode::capture) sum_squares_cuda(pred, target, n, &scalars_dev_->loss, ws_, stream_);
  return std::nan("");
}

bool CudaBackend::readout_fused(const ReadoutShape& shape, const float* x, const float* y, ReadoutCell& cell,
                                bool train, bool norms) {
  // The algebra is float32 only: a bf16 or tf32 cell takes the op sequence, which rounds
  // as asked (the emulated device found bf16 read-out cells trained in fp32's bits).
  if (!readout_algebra_enabled() || precision_ != Precision::fp32 || !readout_cuda_supported(shape, 1)) return false;
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    readout_cuda(shape, x, y, &cell, 1, norms, train, nullptr, ws_, stream_);
    return true;
  }
  loss_divisor_ = static_cast<double>(shape.B);
  cell.loss = std::nan("");  // in step_scalars().loss
  if (mode_ == Mode::capture) {
    const OpTimer timed(this);
    readout_cuda(shape, x, y, &cell, 1, norms, train, &scalars_dev_->loss, ws_, stream_);
  }
  return true;
}

bool CudaBackend::readout_together(const std::vector<CudaBackend*>& backends, const ReadoutShape& shape, const float* x,
                                   const float* y, std::vector<ReadoutCell>& cells, bool norms) {
  const int64_t K = static_cast<int64_t>(cells.size());
  if (mode_ != Mode::eager) throw std::logic_error("CudaBackend::readout_together: not inside a step graph");
  if (backends.size() != cells.size() || backends.empty() || backends[0] != this)
    throw std::logic_error("CudaBackend::readout_together: one backend a cell, this one first");
  for (const CudaBackend* b : backends)
    if (b->device_ != device_)
      throw std::logic_error("CudaBackend::readout_together: cells on GPUs " + std::to_string(device_) + " and " +
                             std::to_string(b->device_));
  if (!readout_algebra_enabled() || !readout_cuda_supported(shape, K)) return false;
  for (const CudaBackend* b : backends)
    if (b->precision_ != Precision::fp32) return false;  // as readout_fused
  for (CudaBackend* b : backends)
    if (b != this) wait_for(*b);
  {
    const OpTimer timed(this);
    readout_cuda(shape, x, y, cells.data(), K, norms, true, nullptr, ws_, stream_);  // waits: the losses
  }
  for (CudaBackend* b : backends)
    if (b != this) b->wait_for(*this);
  return true;
}

void CudaBackend::wait_for(CudaBackend& other) {
  if (!other.order_) cuda_check(cudaEventCreateWithFlags(&other.order_, cudaEventDisableTiming), "cudaEventCreate");
  cuda_check(cudaEventRecord(other.order_, other.stream_), "cudaEventRecord (order)");
  cuda_check(cudaStreamWaitEvent(stream_, other.order_, 0), "cudaStreamWaitEvent (order)");
}

double CudaBackend::global_norm(const float* g, int64_t n) {
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    return global_norm_cuda(g, n, ws_, stream_);
  }
  if (mode_ == Mode::capture) sum_squares_cuda(g, nullptr, n, &scalars_dev_->grad_sq, ws_, stream_);
  return std::nan("");
}

// ---- launch-free steps ------------------------------------------------------------------------

uint64_t CudaBackend::allocation_epoch() const {
  return epoch_ + attention_cuda_workspace_epoch(ws_);
}

void CudaBackend::begin_capture() {
  bind();
  drop_step_graph();
  if (!scalars_dev_) {
    void* d = nullptr;
    cuda_check(cudaMalloc(&d, sizeof(CudaStepScalars)), "cudaMalloc (step scalars)");
    scalars_dev_ = static_cast<CudaStepScalars*>(d);
    void* h = nullptr;
    cuda_check(cudaMallocHost(&h, sizeof(CudaStepScalars)), "cudaMallocHost (step scalars)");
    scalars_host_ = static_cast<CudaStepScalars*>(h);
    std::memset(scalars_host_, 0, sizeof(CudaStepScalars));
  }
  synchronize();
  cuda_check(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  mode_ = Mode::capture;
}

void CudaBackend::end_capture() {
  cudaGraph_t graph = nullptr;
  mode_ = Mode::eager;
  // Ends the capture whatever happened inside it (an op that threw leaves it open).
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (ended != cudaSuccess || graph == nullptr) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // clear the capture's error
    cuda_check(ended == cudaSuccess ? cudaErrorStreamCaptureInvalidated : ended, "cudaStreamEndCapture");
  }
  const cudaError_t made = cudaGraphInstantiate(&graph_exec_, graph, 0);
  cudaGraphDestroy(graph);
  if (made != cudaSuccess) graph_exec_ = nullptr;
  cuda_check(made, "cudaGraphInstantiate");
}

void CudaBackend::abandon_capture() noexcept {
  mode_ = Mode::eager;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream_, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
  }
  cudaGetLastError();
  drop_step_graph();
}

void CudaBackend::drop_step_graph() {
  if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
  graph_exec_ = nullptr;
}

void CudaBackend::launch_step_graph(float lr, double c1, double c2, double clip) {
  if (!graph_exec_) throw std::logic_error("CudaBackend: launch_step_graph without a captured step");
  scalars_host_->lr = lr;
  scalars_host_->c1 = c1;
  scalars_host_->c2 = c2;
  scalars_host_->clip = clip;
  cuda_check(cudaMemcpyAsync(scalars_dev_, scalars_host_, sizeof(CudaStepScalars), cudaMemcpyHostToDevice, stream_),
             "cudaMemcpyAsync (step scalars in)");
  {
    const OpTimer timed(this);  // a replay has no gaps between its kernels: its time is theirs
    cuda_check(cudaGraphLaunch(graph_exec_, stream_), "cudaGraphLaunch");
  }
  cuda_check(cudaMemcpyAsync(scalars_host_, scalars_dev_, sizeof(CudaStepScalars), cudaMemcpyDeviceToHost, stream_),
             "cudaMemcpyAsync (step scalars out)");
}

const CudaStepScalars& CudaBackend::step_scalars() {
  synchronize();
  return *scalars_host_;
}

void CudaBackend::clip_gradients(float* g, int64_t n, double coef) {
  if (mode_ == Mode::eager) {
    if (coef < 1.0) scale_inplace(g, n, static_cast<float>(coef));
  } else if (mode_ == Mode::capture) {
    clip_decision_cuda(scalars_dev_, stream_);
    scale_by_clip_cuda(g, n, scalars_dev_, stream_);
  }
}

void CudaBackend::adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
                               float eps, float wd, int64_t t) {
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    adamw_update_cuda(p, g, m, v, n, lr, b1, b2, eps, wd, t, stream_);
  } else if (mode_ == Mode::capture) {
    adamw_update_graph_cuda(p, g, m, v, n, b1, b2, eps, wd, scalars_dev_, stream_);
  }
}

void CudaBackend::sgd_update(float* p, const float* g, float* buf, int64_t n, float lr, float momentum, float wd) {
  if (mode_ == Mode::eager) {
    const OpTimer timed(this);
    sgd_update_cuda(p, g, buf, n, lr, momentum, wd, stream_);
  } else if (mode_ == Mode::capture) {
    sgd_update_graph_cuda(p, g, buf, n, momentum, wd, scalars_dev_, stream_);
  }
}

// ---- attention ------------------------------------------------------------------------------

void CudaBackend::attention_forward(const AttentionSpec& spec, const AttentionShape& shape, const float* q,
                                    const float* k, const float* v, const float* key_mask, float* o, float* lse,
                                    double* attn_fro, double* jac_fro) {
  if (mode_ == Mode::staging) return;
  const OpTimer timed(this);
  if (precision_ != Precision::bf16 || !attention_cuda_fused_supported(shape)) {
    attention_forward_cuda(spec, shape, CudaDType::f32, q, k, v, key_mask, o, lse, attn_fro, jac_fro, ws_, stream_);
    return;
  }
  const OperandSizes n = operand_sizes(shape);
  void* ob = bf16_slot(3, nullptr, n.o);
  attention_forward_cuda(spec, shape, CudaDType::bf16, bf16_slot(0, q, n.q), bf16_slot(1, k, n.k), bf16_slot(2, v, n.v),
                         key_mask, ob, lse, attn_fro, jac_fro, ws_, stream_);
  bf16_to_f32_cuda(o, ob, n.o, stream_);
}

void CudaBackend::attention_backward(const AttentionSpec& spec, const AttentionShape& shape, const float* q,
                                     const float* k, const float* v, const float* key_mask, const float* o,
                                     const float* dout, const float* lse, float* dq, float* dk, float* dv) {
  if (mode_ == Mode::staging) return;
  const OpTimer timed(this);
  if (precision_ != Precision::bf16 || !attention_cuda_fused_supported(shape)) {
    attention_backward_cuda(spec, shape, CudaDType::f32, q, k, v, key_mask, o, dout, lse, dq, dk, dv, ws_, stream_);
    return;
  }
  const OperandSizes n = operand_sizes(shape);
  void* dqb = bf16_slot(5, nullptr, n.q);
  void* dkb = bf16_slot(6, nullptr, n.k);
  void* dvb = bf16_slot(7, nullptr, n.v);
  // o came from a bf16 O (attention_forward), so its copy is that O exactly.
  attention_backward_cuda(spec, shape, CudaDType::bf16, bf16_slot(0, q, n.q), bf16_slot(1, k, n.k),
                          bf16_slot(2, v, n.v), key_mask, bf16_slot(3, o, n.o), bf16_slot(4, dout, n.o), lse, dqb, dkb,
                          dvb, ws_, stream_);
  bf16_to_f32_cuda(dq, dqb, n.q, stream_);
  bf16_to_f32_cuda(dk, dkb, n.k, stream_);
  bf16_to_f32_cuda(dv, dvb, n.v, stream_);
}

void CudaBackend::norms_of_real_queries(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                        const HeadBuffers& heads, double* attn_fro, double* jac_fro) {
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  std::vector<float> mask(static_cast<size_t>(B * T));
  download(mask.data(), key_mask, B * T);  // waits: logged steps only
  const RealQueryRows rows = real_query_rows(mask.data(), B, T);
  const auto n_rows = static_cast<int64_t>(rows.rows.size());
  auto* rows_dev = static_cast<int32_t*>(scratch(8, static_cast<size_t>(real_query_rows_bytes(n_rows))));
  auto* buf = static_cast<float*>(scratch(9, static_cast<size_t>(real_query_buf_bytes(H, T, hd))));
  norms_of_real_queries_cuda(
      spec, shape, key_mask, rows, heads.q, heads.k, heads.v, attn_fro, jac_fro, rows_dev, buf,
      [this](const AttentionSpec& sp, const AttentionShape& sh, const float* q, const float* k, const float* v,
             const float* mk, float* o, float* lse, double* af,
             double* jf) { attention_forward(sp, sh, q, k, v, mk, o, lse, af, jf); },
      stream_);
}

// ---- composites: each the op sequence its CPU version fuses -----------------------------

void CudaBackend::matmul_residual_forward(float* out, const float* inp, const float* weight, const float* bias,
                                          const float* resid, int64_t N, int64_t C, int64_t OC) {
  matmul_forward(out, inp, weight, bias, N, C, OC);
  residual_forward(out, out, resid, N * OC);
}

void CudaBackend::matmul_gelu_forward(float* pre, float* out, const float* inp, const float* weight, const float* bias,
                                      int64_t N, int64_t C, int64_t OC) {
  matmul_forward(pre, inp, weight, bias, N, C, OC);
  gelu_forward(out, pre, N * OC);
}

void CudaBackend::matmul_backward_overwrite(float* dinp, float* dweight, float* dbias, const float* dout,
                                            const float* inp, const float* weight, int64_t N, int64_t C, int64_t OC) {
  zero(dinp, N * C);
  matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, C, OC);
}

void CudaBackend::gelu_matmul_backward(float* dpre, float* dgelu, float* dweight, float* dbias, const float* dout,
                                       const float* inp, const float* pre, const float* weight, int64_t N, int64_t C,
                                       int64_t OC) {
  zero(dgelu, N * C);
  matmul_backward(dgelu, dweight, dbias, dout, inp, weight, N, C, OC);
  zero(dpre, N * C);
  gelu_backward(dpre, pre, dgelu, N * C);
}

void CudaBackend::attention_block_forward(const AttentionSpec& spec, const AttentionShape& shape, const float* key_mask,
                                          const float* qkv, const HeadBuffers& heads, float* atty, float* lse,
                                          double* attn_fro, double* jac_fro) {
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  split_heads(heads.q, heads.k, heads.v, qkv, B, T, H, hd);
  attention_forward(spec, shape, heads.q, heads.k, heads.v, key_mask, heads.o, lse, attn_fro, jac_fro);
  if (spec.collect_norms && key_mask != nullptr) norms_of_real_queries(spec, shape, key_mask, heads, attn_fro, jac_fro);
  heads_to_rows(atty, heads.o, B, T, H, hd);
}

void CudaBackend::attention_block_backward(const AttentionSpec& spec, const AttentionShape& shape,
                                           const float* key_mask, const float*, const HeadBuffers& heads, const float*,
                                           const float* lse, const float* datty, const HeadBuffers& dheads,
                                           float* dqkv) {
  const int64_t B = shape.B, H = shape.H, T = shape.Nq, hd = shape.d;
  rows_to_heads(dheads.o, datty, B, T, H, hd);
  attention_backward(spec, shape, heads.q, heads.k, heads.v, key_mask, heads.o, dheads.o, lse, dheads.q, dheads.k,
                     dheads.v);
  merge_heads(dqkv, dheads.q, dheads.k, dheads.v, B, T, H, hd);
}

// ---- NCCL ---------------------------------------------------------------------------------

CudaBackend::Collective::Collective(const std::vector<CudaBackend*>& replicas) : replicas_(replicas) {
  if (replicas.size() < 2) return;  // one replica: nothing to reduce, NCCL not needed
  if (const std::string why = nccl_unavailable_reason(); !why.empty())
    throw std::runtime_error("data-parallel training on " + std::to_string(replicas.size()) +
                             " GPUs needs NCCL: " + why);
  std::vector<int> devices;
  for (const CudaBackend* b : replicas) devices.push_back(b->device());
  comms_ = nccl_comms_create(devices.data(), static_cast<int>(devices.size()));
}

CudaBackend::Collective::~Collective() {
  nccl_comms_destroy(comms_);
}

void CudaBackend::Collective::allreduce_mean(const std::vector<float*>& grads, int64_t n) {
  const size_t k = replicas_.size();
  if (k < 2) return;
  std::vector<cudaStream_t> streams;
  for (const CudaBackend* b : replicas_) streams.push_back(b->stream());
  nccl_allreduce_sum(comms_, grads.data(), n, streams.data());
  const float inv_k = 1.0f / static_cast<float>(k);
  for (size_t r = 0; r < k; ++r) {
    replicas_[r]->bind();
    replicas_[r]->scale_inplace(grads[r], n, inv_k);
  }
}

}  // namespace attnsweep

#endif  // ATTNSWEEP_HAVE_CUDA
