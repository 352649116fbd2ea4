#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <limits>
#include <optional>
#include <stdexcept>

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "kernels/device.h"
#include "worker/cell_loop.h"
#include "worker/checkpoint.h"
#include "worker/cuda_trainer.h"

extern "C" int openblas_get_num_threads(void);
extern "C" void openblas_set_num_threads(int);

namespace attnsweep {

ModelWeights weights_of(const std::vector<TensorInfo>& tensors, const float* host_params) {
  ModelWeights w;
  for (const TensorInfo& t : tensors) w.tensors[t.name] = {host_params + t.offset, t.shape};
  return w;
}

ModelWeights weights_of(const Model& model) {
  return weights_of(model.tensors(), model.params());
}

// ---- the optimizer step ------------------------------------------------------------

template <class Backend>
BasicTrainer<Backend>::BasicTrainer(const ModelConfig& mc, const TrainConfig& tc, int first_device) : mc_(mc), tc_(tc) {
  if (tc.devices < 1) throw std::runtime_error("devices: expected >= 1");
  for (int64_t r = 0; r < tc.devices; ++r)
    replicas_.push_back(std::make_unique<ModelType>(mc, first_device + static_cast<int>(r)));
  replicas_[0]->init(tc.init_seed, tc.init_std);
  broadcast_params();  // identical parameters on every replica
  const int64_t updaters = Backend::kEveryReplicaUpdates ? devices() : 1;
  opt_.resize(static_cast<size_t>(updaters));
  if (tc.optimizer == "adamw")
    for (int64_t r = 0; r < updaters; ++r) {
      Backend& be = replica(r).backend();
      be.allocate(opt_[static_cast<size_t>(r)].m, model().num_params());
      be.allocate(opt_[static_cast<size_t>(r)].v, model().num_params());
    }
  std::vector<Backend*> backends;
  for (auto& m : replicas_) backends.push_back(&m->backend());
  collective_ = std::make_unique<typename Backend::Collective>(backends);
}

template <class Backend>
void BasicTrainer<Backend>::broadcast_params() {
  if (devices() == 1) return;
  std::vector<float> host = params_host();
  for (int64_t r = 1; r < devices(); ++r) replica(r).set_params(host.data());
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::params_host() {
  std::vector<float> host(static_cast<size_t>(model().num_params()));
  model().get_params(host.data());
  return host;
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::m_host() {
  std::vector<float> host(static_cast<size_t>(optimizer_state_size()));
  if (!host.empty()) model().backend().download(host.data(), opt_[0].m.data(), optimizer_state_size());
  return host;
}

template <class Backend>
std::vector<float> BasicTrainer<Backend>::v_host() {
  std::vector<float> host(static_cast<size_t>(optimizer_state_size()));
  if (!host.empty()) model().backend().download(host.data(), opt_[0].v.data(), optimizer_state_size());
  return host;
}

template <class Backend>
void BasicTrainer<Backend>::load_state(const std::vector<float>& params, const std::vector<float>& m,
                                       const std::vector<float>& v) {
  if (static_cast<int64_t>(params.size()) != model().num_params() ||
      static_cast<int64_t>(m.size()) != optimizer_state_size() ||
      static_cast<int64_t>(v.size()) != optimizer_state_size())
    throw std::runtime_error("parameter count differs from the model's");
  for (int64_t r = 0; r < devices(); ++r) replica(r).set_params(params.data());
  for (size_t r = 0; r < opt_.size() && !m.empty(); ++r) {
    Backend& be = replica(static_cast<int64_t>(r)).backend();
    be.upload(opt_[r].m.data(), m.data(), optimizer_state_size());
    be.upload(opt_[r].v.data(), v.data(), optimizer_state_size());
  }
}

template <class Backend>
void BasicTrainer<Backend>::update(int64_t r, double coef, float lr, int64_t t) {
  ModelType& m = replica(r);
  Backend& be = m.backend();
  be.bind();
  const int64_t n = m.num_params(), nd = m.decayed_count();
  float* g = m.grads();
  float* p = m.params();
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when below 1.
  if (coef < 1.0) be.scale_inplace(g, n, static_cast<float>(coef));
  const float wd = static_cast<float>(tc_.weight_decay);
  if (tc_.optimizer == "adamw") {
    OptimizerState& o = opt_[static_cast<size_t>(r)];
    const float b1 = static_cast<float>(tc_.beta1), b2 = static_cast<float>(tc_.beta2),
                eps = static_cast<float>(tc_.eps);
    // Weight matrices [0, nd) are decayed; biases, LayerNorm, positions and CLS are not.
    be.adamw_update(p, g, o.m.data(), o.v.data(), nd, lr, b1, b2, eps, wd, t + 1);
    be.adamw_update(p + nd, g + nd, o.m.data() + nd, o.v.data() + nd, n - nd, lr, b1, b2, eps, 0.0f, t + 1);
  } else {
    be.sgd_update(p, g, nullptr, nd, lr, 0.0f, wd);
    be.sgd_update(p + nd, g + nd, nullptr, n - nd, lr, 0.0f, 0.0f);
  }
}

template <class Backend>
TrainStepResult BasicTrainer<Backend>::step(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                            int64_t t, bool collect_norms) {
  StepResult r;
  if constexpr (requires { Backend::kStepGraphs; }) {
    if (tc_.cuda_graphs && !graphs_failed_ && devices() == 1 && !collect_norms &&
        graphed_step(x, y_class, y_value, B, t, r))
      return r;
  }
  ModelType& m0 = model();
  const int64_t k = devices();
  if (k == 1) {
    r.fwd = m0.forward_backward(x, y_class, y_value, B, collect_norms);
  } else {
    if (B % k != 0)
      throw std::runtime_error("batch " + std::to_string(B) + " is not divisible by devices " + std::to_string(k));
    // Replica rr takes rows [rr B/k, (rr+1) B/k) of the global batch.
    const int64_t Bs = B / k, row = mc_.tokens * mc_.in_dim;
    std::vector<ForwardStats> f(static_cast<size_t>(k));
    Backend::for_each_replica(k, [&](int64_t rr) {
      ModelType& m = replica(rr);
      const int64_t first = rr * Bs;
      f[static_cast<size_t>(rr)] =
          m.forward_backward(x + first * row, y_class ? y_class + first : nullptr,
                             y_value ? y_value + first * mc_.targets_per_sample() : nullptr, Bs, collect_norms);
    });
    double loss = 0;
    for (int64_t rr = 0; rr < k; ++rr) {
      const ForwardStats& fr = f[static_cast<size_t>(rr)];
      loss += fr.loss * static_cast<double>(Bs);  // weight by shard size
      r.fwd.correct += fr.correct;
      if (rr == 0) {
        r.fwd.attn_fro = fr.attn_fro;
        r.fwd.jac_fro = fr.jac_fro;
      } else {
        for (size_t i = 0; i < fr.attn_fro.size(); ++i) r.fwd.attn_fro[i] += fr.attn_fro[i];
        for (size_t i = 0; i < fr.jac_fro.size(); ++i) r.fwd.jac_fro[i] += fr.jac_fro[i];
      }
    }
    r.fwd.loss = loss / static_cast<double>(B);
    for (double& a : r.fwd.attn_fro) a /= static_cast<double>(k);
    for (double& a : r.fwd.jac_fro) a /= static_cast<double>(k);
    std::vector<float*> grads;
    for (int64_t rr = 0; rr < k; ++rr) grads.push_back(replica(rr).grads());
    collective_->allreduce_mean(grads, m0.num_params());
  }
  apply_gradients(r, t);
  return r;
}

template <class Backend>
void BasicTrainer<Backend>::apply_gradients(StepResult& r, int64_t t) {
  ModelType& m0 = model();
  m0.backend().bind();
  r.grad_norm = m0.backend().global_norm(m0.grads(), m0.num_params());
  r.lr = lr_at(tc_, t);
  r.finite = std::isfinite(r.fwd.loss) && std::isfinite(r.grad_norm);
  if (!r.finite) return;
  const double coef = tc_.clip > 0 ? tc_.clip / (r.grad_norm + 1e-6) : 1.0;
  const float lr = static_cast<float>(r.lr);
  for (int64_t u = 0; u < static_cast<int64_t>(opt_.size()); ++u) update(u, coef, lr, t);
  if (!Backend::kEveryReplicaUpdates) broadcast_params();
}

template <class Backend>
bool BasicTrainer<Backend>::graphed_step(const float* x, const int32_t* y_class, const float* y_value, int64_t B,
                                         int64_t t, StepResult& r) {
#ifdef ATTNSWEEP_HAVE_CUDA  // CudaStepScalars and adamw_bias_corrections (kernels/ops_cuda.h)
  if constexpr (requires { Backend::kStepGraphs; }) {
    ModelType& m = model();
    Backend& be = m.backend();
    be.bind();
    const uint64_t epoch = be.allocation_epoch();
    if (!(be.has_step_graph() && graph_B_ == B && graph_epoch_ == epoch)) {
      // Captured when the step before ran op by op at this batch size and nothing was
      // allocated since it began: then every buffer and scratch the step needs exists,
      // and the capture allocates nothing (it could not).
      if (!(warm_B_ == B && warm_epoch_ == epoch)) {
        warm_B_ = B;
        warm_epoch_ = epoch;
        return false;
      }
      try {
        be.begin_capture();
        m.forward(x, y_class, y_value, B, false);
        m.backward();
        graph_tail();
        be.end_capture();
      } catch (const std::exception& e) {
        be.abandon_capture();
        graphs_failed_ = true;
        std::fprintf(stderr, "attnsweep: CUDA graph capture failed (%s); the steps of this cell launch op by op\n",
                     e.what());
        return false;
      }
      graph_B_ = B;
      graph_epoch_ = be.allocation_epoch();
    } else {
      // The same host code with every op skipped: it stages this batch into the pinned
      // buffers the graph copies from.
      be.begin_staging();
      m.forward(x, y_class, y_value, B, false);
      m.backward();
      graph_tail();
      be.end_staging();
    }
    r.lr = lr_at(tc_, t);
    double c1 = 0, c2 = 0;
    adamw_bias_corrections(static_cast<float>(tc_.beta1), static_cast<float>(tc_.beta2), t + 1, &c1, &c2);
    be.launch_step_graph(static_cast<float>(r.lr), c1, c2, tc_.clip);
    const CudaStepScalars& s = be.step_scalars();
    r.fwd.loss = s.loss.sum / be.step_loss_divisor();
    r.fwd.correct = s.loss.count;
    r.grad_norm = std::sqrt(s.grad_sq.sum);
    r.finite = std::isfinite(r.fwd.loss) && std::isfinite(r.grad_norm);
    ++graphed_steps_;
    return true;
  }
#endif
  (void)x, (void)y_class, (void)y_value, (void)B, (void)t, (void)r;
  return false;
}

template <class Backend>
void BasicTrainer<Backend>::graph_tail() {
  if constexpr (requires { Backend::kStepGraphs; }) {
    ModelType& m = model();
    Backend& be = m.backend();
    const int64_t n = m.num_params(), nd = m.decayed_count();
    float* g = m.grads();
    float* p = m.params();
    be.global_norm(g, n);  // into the step's scalars
    be.clip_decision();
    be.scale_by_clip(g, n);
    const float wd = static_cast<float>(tc_.weight_decay);
    if (tc_.optimizer == "adamw") {
      OptimizerState& o = opt_[0];
      const float b1 = static_cast<float>(tc_.beta1), b2 = static_cast<float>(tc_.beta2),
                  eps = static_cast<float>(tc_.eps);
      be.adamw_update_graph(p, g, o.m.data(), o.v.data(), nd, b1, b2, eps, wd);
      be.adamw_update_graph(p + nd, g + nd, o.m.data() + nd, o.v.data() + nd, n - nd, b1, b2, eps, 0.0f);
    } else {
      be.sgd_update_graph(p, g, nullptr, nd, 0.0f, wd);
      be.sgd_update_graph(p + nd, g + nd, nullptr, n - nd, 0.0f, 0.0f);
    }
  }
}

template class BasicTrainer<CpuBackend>;
#ifdef ATTNSWEEP_HAVE_CUDA
template class BasicTrainer<CudaBackend>;
#endif

// ---- the training loop -------------------------------------------------------------

namespace {

// The training loop of train_cell on a built trainer of any backend: one CellLoop.
template <class TrainerT>
TaskOutput train_loop(TrainerT& tr, const TrainConfig& tc, const ModelConfig& mc, const json& config,
                      const TaskContext& ctx, const TrainingData& data) {
  CellLoop<TrainerT> loop(tr, tc, mc, config, ctx, data);
  while (loop.next()) {
    const HostBatch& b = loop.take_batch(nullptr);
    loop.after_step(tr.step(b.x.data(), b.y_class.data(), b.y_value.data(), tc.batch, loop.step(), loop.logging()));
  }
  return loop.finish();
}

}  // namespace

BlasOneThread::BlasOneThread() : saved_(openblas_get_num_threads()) {
  openblas_set_num_threads(1);
}
BlasOneThread::~BlasOneThread() {
  openblas_set_num_threads(saved_);
}

TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data) {
  const int gpu = cuda_device_index(ctx.device);  // throws for an unknown device name
  const TrainConfig tc = train_config_of(config);
  const ModelConfig mc = model_config_of(config, data);
  if (gpu < 0) {
    const BlasOneThread blas_one_thread;
    Trainer tr(mc, tc);
    return train_loop(tr, tc, mc, config, ctx, data);
  }
#ifdef ATTNSWEEP_HAVE_CUDA
  const int visible = cuda_device_count();
  if (gpu + tc.devices > visible)
    throw std::runtime_error(
        "device " + ctx.device + " with devices = " + std::to_string(tc.devices) + " needs GPU" +
        (tc.devices == 1 ? " " + std::to_string(gpu)
                         : "s " + std::to_string(gpu) + ".." + std::to_string(gpu + tc.devices - 1)) +
        ", but " + std::to_string(visible) + " CUDA device" + (visible == 1 ? " is" : "s are") +
        " visible (CUDA_VISIBLE_DEVICES=" +
        (std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "unset") + ")");
  TrainConfig tcg = tc;
  // Launch-free steps: opt-in until they have been checked on a GPU (issue #20).
  const char* graphs = std::getenv("ATTNSWEEP_CUDA_GRAPHS");
  tcg.cuda_graphs = graphs != nullptr && std::string(graphs) == "1";
  CudaTrainer tr(mc, tcg, gpu);
  return train_loop(tr, tcg, mc, config, ctx, data);
#else
  throw std::runtime_error("device " + ctx.device +
                           ": this build has no CUDA backend (rebuild with nvcc available, -DATTNSWEEP_CUDA=ON), "
                           "or run the cell with --device cpu");
#endif
}

}  // namespace attnsweep
