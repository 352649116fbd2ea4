// The definitions of BasicTrainer's members (worker/training/trainer.h), for the translation
// units that instantiate it: worker/training/trainer.cpp (CpuBackend) and worker/training/cuda_trainer.cpp
// (CudaBackend, in CUDA builds). Nothing here knows a backend by name.
#pragma once

#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/training/trainer.h"

namespace attnsweep {

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
  be.clip_gradients(g, n, coef);
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
                                            int64_t t, bool collect_norms, const int64_t* idx) {
  StepResult r;
  if (tc_.cuda_graphs && devices() == 1 && !collect_norms) {
    // The whole step as one launch where the backend can (CUDA): the same host code,
    // whose ops the backend records once and then replays (ModelBackend::graphed_step).
    ModelType& m = model();
    const StepGraphArgs a{lr_at(tc_, t), t + 1, static_cast<float>(tc_.beta1), static_cast<float>(tc_.beta2), tc_.clip};
    const std::optional<GraphedStep> g = m.backend().graphed_step(B, a, [&] {
      m.forward(x, y_class, y_value, B, false, idx);
      m.backward();
      m.backend().global_norm(m.grads(), m.num_params());  // in a graph: into the step's scalars
      update(0, 1.0, 0.0f, t);                             // in a graph: clip, lr and t from them
    });
    if (g) {
      r.lr = a.lr;
      r.fwd.loss = g->loss;
      r.fwd.correct = g->correct;
      r.grad_norm = g->grad_norm;
      r.finite = std::isfinite(r.fwd.loss) && std::isfinite(r.grad_norm);
      return r;
    }
  }
  ModelType& m0 = model();
  const int64_t k = devices();
  if (k == 1) {
    r.fwd = m0.forward_backward(x, y_class, y_value, B, collect_norms, idx);
  } else {
    if (B % k != 0)
      throw std::runtime_error("batch " + std::to_string(B) + " is not divisible by devices " + std::to_string(k));
    // Replica rr takes rows [rr B/k, (rr+1) B/k) of the global batch.
    const int64_t Bs = B / k, row = mc_.tokens * mc_.in_dim;
    std::vector<ForwardStats> f(static_cast<size_t>(k));
    Backend::for_each_replica(k, [&](int64_t rr) {
      ModelType& m = replica(rr);
      const int64_t first = rr * Bs;
      f[static_cast<size_t>(rr)] = m.forward_backward(x + first * row, y_class ? y_class + first : nullptr,
                                                      y_value ? y_value + first * mc_.targets_per_sample() : nullptr,
                                                      Bs, collect_norms, idx ? idx + first : nullptr);
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

}  // namespace attnsweep
