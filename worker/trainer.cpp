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
#include "worker/checkpoint.h"
#include "worker/cuda_trainer.h"
#include "worker/prefetch.h"

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
    r.fwd = m0.forward(x, y_class, y_value, B, collect_norms);
    m0.backward();
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
          m.forward(x + first * row, y_class ? y_class + first : nullptr,
                    y_value ? y_value + first * mc_.targets_per_sample() : nullptr, Bs, collect_norms);
      m.backward();
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
  m0.backend().bind();
  r.grad_norm = m0.backend().global_norm(m0.grads(), m0.num_params());
  r.lr = lr_at(tc_, t);
  r.finite = std::isfinite(r.fwd.loss) && std::isfinite(r.grad_norm);
  if (!r.finite) return r;
  const double coef = tc_.clip > 0 ? tc_.clip / (r.grad_norm + 1e-6) : 1.0;
  const float lr = static_cast<float>(r.lr);
  for (int64_t u = 0; u < static_cast<int64_t>(opt_.size()); ++u) update(u, coef, lr, t);
  if (!Backend::kEveryReplicaUpdates) broadcast_params();
  return r;
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

// ---- data and evaluation -----------------------------------------------------------

namespace {

// Batch t holds samples t*B .. t*B + B - 1 of an endless stream of epochs; each epoch is
// a permutation drawn from (seed, epoch) alone, so any step's batch can be rebuilt.
class Sampler {
 public:
  Sampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  void indices(int64_t first_sample, int64_t count, int64_t* out) {
    for (int64_t j = 0; j < count; ++j) {
      const int64_t g = first_sample + j, epoch = g / n_;
      if (epoch != epoch_) shuffle(epoch);
      out[j] = perm_[static_cast<size_t>(g % n_)];
    }
  }

 private:
  void shuffle(int64_t epoch) {
    perm_.resize(static_cast<size_t>(n_));
    for (int64_t i = 0; i < n_; ++i) perm_[static_cast<size_t>(i)] = i;
    Rng rng(seed_of({seed_, 0xDA7Aull, static_cast<uint64_t>(epoch)}));
    for (int64_t i = n_ - 1; i > 0; --i) {  // Fisher-Yates
      const int64_t j = static_cast<int64_t>(rng.uniform() * static_cast<double>(i + 1));
      std::swap(perm_[static_cast<size_t>(i)], perm_[static_cast<size_t>(std::min(j, i))]);
    }
    epoch_ = epoch;
  }
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = -1;
  std::vector<int64_t> perm_;
};

struct EvalResult {
  double loss = 0, accuracy = 0;
  double rel_l2 = 0;  // token_regress: mean over samples of ||pred - y|| / ||y||
};

// Sum over the B samples of ||pred_b - y_b|| / ||y_b|| (rows of `per` values), float64.
double sum_rel_l2(const float* pred, const float* y, int64_t B, int64_t per) {
  double s = 0;
  for (int64_t b = 0; b < B; ++b) {
    double num = 0, den = 0;
    for (int64_t j = b * per; j < (b + 1) * per; ++j) {
      const double d = static_cast<double>(pred[j]) - y[j];
      num += d * d;
      den += static_cast<double>(y[j]) * y[j];
    }
    s += std::sqrt(num / den);
  }
  return s;
}

// Mean loss and accuracy (token_regress: and relative L2) over the test split (or its
// first eval_batches batches).
template <class ModelT>
EvalResult evaluate(ModelT& model, const TrainingData& data, const TrainConfig& tc, std::vector<float>& x,
                    std::vector<int32_t>& yc, std::vector<float>& yv) {
  int64_t n = data.n_test;
  if (tc.eval_batches > 0) n = std::min(n, tc.eval_batches * tc.batch);
  double loss = 0, rel_l2 = 0;
  int64_t correct = 0;
  const int64_t per = model.config().targets_per_sample();
  const bool per_token = model.config().head == Head::token_regress;
  std::vector<float> pred;  // a device model's predictions on the host
  std::vector<int64_t> idx(static_cast<size_t>(tc.batch));
  for (int64_t s = 0; s < n; s += tc.batch) {
    const int64_t B = std::min(tc.batch, n - s);
    for (int64_t j = 0; j < B; ++j) idx[static_cast<size_t>(j)] = s + j;
    data.fill(1, idx.data(), B, x.data(), yc.data(), yv.data());
    const ForwardStats st = model.forward(x.data(), yc.data(), yv.data(), B, false);
    loss += st.loss * static_cast<double>(B);
    correct += st.correct;
    if (per_token) rel_l2 += sum_rel_l2(model.host_predictions(pred), yv.data(), B, per);
  }
  EvalResult r;
  r.loss = n > 0 ? loss / static_cast<double>(n) : std::nan("");
  r.accuracy = data.classes > 0 && n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : std::nan("");
  r.rel_l2 = per_token && n > 0 ? rel_l2 / static_cast<double>(n) : std::nan("");
  return r;
}

}  // namespace

// ---- the training loop -------------------------------------------------------------

namespace {

// The training loop of train_cell on a built trainer of any backend.
template <class TrainerT>
TaskOutput train_loop(TrainerT& tr, const TrainConfig& tc, const ModelConfig& mc, const json& config,
                      const TaskContext& ctx, const TrainingData& data) {
  const std::string config_text = config.dump();
  const int64_t L = mc.layers, H = mc.heads, B = tc.batch;
  const bool classify = data.classes > 0;

  TrainState st;
  if (!ctx.checkpoint_path.empty()) {
    std::string why;
    if (load_checkpoint(ctx.checkpoint_path, config_text, tr, st, &why)) {
      std::fprintf(stderr, "attnsweep train: resuming from %s at step %lld\n", ctx.checkpoint_path.c_str(),
                   static_cast<long long>(st.step));
    } else if (why != "absent") {
      std::fprintf(stderr, "attnsweep train: ignoring checkpoint %s (%s); starting from step 0\n",
                   ctx.checkpoint_path.c_str(), why.c_str());
    }
  }

  std::vector<float> x(static_cast<size_t>(B * data.tokens * data.in_dim));
  std::vector<int32_t> yc(static_cast<size_t>(B));
  std::vector<float> yv(static_cast<size_t>(B * mc.targets_per_sample()));
  Sampler sampler(data.n_train, tc.seed);
  // The training batch at a sampler cursor; made one step ahead on a host thread where
  // the backend's step leaves the host waiting (CUDA), in line otherwise (the CPU's step
  // uses every core).
  HostBatch line;
  line.x.resize(x.size());
  line.y_class.resize(yc.size());
  line.y_value.resize(yv.size());
  line.idx.resize(static_cast<size_t>(B));
  auto make_batch = [&](int64_t cursor, HostBatch& b) {
    sampler.indices(cursor, B, b.idx.data());
    data.fill(0, b.idx.data(), B, b.x.data(), b.y_class.data(), b.y_value.data());
  };
  constexpr bool host_ahead = requires {
    TrainerT::ModelType::BackendType::kPrefetchBatches;
  };
  std::optional<BatchPrefetcher> ahead;
  if constexpr (host_ahead) ahead.emplace(make_batch, line);
  // The task's own metrics of an evaluation (TrainingData::measure, e.g. paper B's float64
  // limit error): where the host would otherwise wait on the device (CUDA), computed on a
  // host thread from a host copy of the parameters while training goes on, and added to
  // the trajectory, in order, before the next evaluation, a checkpoint or the end.
  std::future<std::vector<double>> measuring;
  Trajectory& tj = st.traj;
  TaskOutput out;
  const float nanf = std::numeric_limits<float>::quiet_NaN();

  double last_rel_l2 = std::nan("");
  auto add_measured = [&](const std::vector<double>& v) {
    if (v.size() != data.eval_metrics.size())
      throw std::runtime_error("task measured " + std::to_string(v.size()) + " metrics, declared " +
                               std::to_string(data.eval_metrics.size()));
    tj.eval_task.insert(tj.eval_task.end(), v.begin(), v.end());
  };
  auto finish_measure = [&] {
    if (measuring.valid()) add_measured(measuring.get());
  };
  auto record_eval = [&](int64_t step) {
    if (ahead) ahead->wait();  // the data source, one caller at a time
    const EvalResult e = evaluate(tr.model(), data, tc, x, yc, yv);
    last_rel_l2 = e.rel_l2;
    tj.eval_step.push_back(step);
    tj.eval_loss.push_back(static_cast<float>(e.loss));
    tj.eval_accuracy.push_back(static_cast<float>(e.accuracy));
    if (data.measure) {
      // The task reads host parameters: a device trainer's are copied back first.
      std::vector<float> host = tr.params_host();
      if constexpr (host_ahead) {
        finish_measure();
        measuring = std::async(std::launch::async, [&data, tensors = tr.model().tensors(), host = std::move(host)] {
          return data.measure(weights_of(tensors, host.data()));
        });
      } else {
        add_measured(data.measure(weights_of(tr.model().tensors(), host.data())));
      }
    }
  };

  const int64_t resumed_at = st.step;
  for (; st.step < tc.steps; ++st.step) {
    const int64_t t = st.step;
    // Step boundary: everything up to t is in `st` and the model.
    const bool stop = ctx.stop_requested();
    if (!ctx.checkpoint_path.empty() &&
        (stop || (tc.checkpoint_every > 0 && t % tc.checkpoint_every == 0 && t != resumed_at))) {
      finish_measure();  // the trajectory in the checkpoint is complete up to t
      save_checkpoint(ctx.checkpoint_path, config_text, tc, tr, st);
    }
    if (stop) {
      out.status = CellStatus::interrupted;
      return out;
    }
    HostBatch* batch = &line;
    if (ahead)
      batch = &ahead->take(st.samples_seen, st.samples_seen + B);
    else
      make_batch(st.samples_seen, line);
    st.samples_seen += B;
    const bool log = t % tc.log_every == 0 || t == tc.steps - 1;
    const TrainStepResult r = tr.step(batch->x.data(), batch->y_class.data(), batch->y_value.data(), B, t, log);
    if (log || !r.finite) {
      tj.step.push_back(t);
      tj.loss.push_back(static_cast<float>(r.fwd.loss));
      tj.accuracy.push_back(classify ? static_cast<float>(static_cast<double>(r.fwd.correct) / static_cast<double>(B))
                                     : nanf);
      tj.lr.push_back(static_cast<float>(r.lr));
      tj.grad_norm.push_back(static_cast<float>(r.grad_norm));
      for (int64_t i = 0; i < L * H; ++i) {
        tj.attn_fro.push_back(log ? static_cast<float>(r.fwd.attn_fro[static_cast<size_t>(i)]) : nanf);
        tj.jac_fro.push_back(log ? static_cast<float>(r.fwd.jac_fro[static_cast<size_t>(i)]) : nanf);
      }
    }
    if (!r.finite) {
      out.status = CellStatus::diverged;
      out.diverged_at_step = t;
      break;
    }
    if (tc.eval_every > 0 && (t + 1) % tc.eval_every == 0) record_eval(t + 1);
  }

  if (out.status == CellStatus::complete) {
    if (tj.eval_step.empty() || tj.eval_step.back() != tc.steps) record_eval(tc.steps);
  }
  finish_measure();
  if (out.status == CellStatus::complete) {
    out.final_metrics["test_loss"] = tj.eval_loss.back();
    if (classify)
      out.final_metrics["test_accuracy"] = tj.eval_accuracy.back();
    else
      out.final_metrics["test_mse"] = tj.eval_loss.back();
    if (mc.head == Head::token_regress) out.final_metrics["test_rel_l2"] = last_rel_l2;
  } else {
    // The parameters are those before the non-finite step; the cell's verdict is the
    // divergence, not a test score of weights it never finished training.
    out.final_metrics["test_loss"] = std::nan("");
    if (classify) out.final_metrics["test_accuracy"] = std::nan("");
    if (mc.head == Head::token_regress) out.final_metrics["test_rel_l2"] = std::nan("");
  }
  // The task's own metrics: the last evaluation's values (NaN when the cell diverged).
  const size_t M = data.measure ? data.eval_metrics.size() : 0;
  for (size_t j = 0; j < M; ++j)
    out.final_metrics[data.eval_metrics[j].name] =
        out.status == CellStatus::complete ? tj.eval_task[tj.eval_task.size() - M + j] : std::nan("");
  out.final_metrics["train_loss"] = tj.loss.empty() ? std::nan("") : tj.loss.back();

  const uint64_t T = tj.step.size(), E = tj.eval_step.size();
  const uint64_t uL = static_cast<uint64_t>(L), uH = static_cast<uint64_t>(H);
  // Paths, types and descriptions: the result schema (experiments/result_schema.cpp).
  out.series.push_back(result_series("/train/step", {T}, tj.step));
  out.series.push_back(result_series("/train/loss", {T}, tj.loss));
  out.series.push_back(result_series("/train/accuracy", {T}, tj.accuracy));
  out.series.push_back(result_series("/train/lr", {T}, tj.lr));
  out.series.push_back(result_series("/train/grad_norm", {T}, tj.grad_norm));
  out.series.push_back(result_series("/norms/attn_fro", {T, uL, uH}, tj.attn_fro));
  out.series.push_back(result_series("/norms/jac_fro", {T, uL, uH}, tj.jac_fro));
  out.series.push_back(result_series("/eval/step", {E}, tj.eval_step));
  out.series.push_back(result_series("/eval/loss", {E}, tj.eval_loss));
  out.series.push_back(result_series("/eval/accuracy", {E}, tj.eval_accuracy));
  for (size_t j = 0; j < M; ++j) {
    std::vector<double> col(static_cast<size_t>(E));
    for (size_t e = 0; e < E; ++e) col[e] = tj.eval_task[e * M + j];
    out.series.push_back({data.eval_metrics[j].path, {E}, std::move(col), data.eval_metrics[j].description});
  }
  return out;
}

}  // namespace

TaskOutput train_cell(const json& config, const TaskContext& ctx, const TrainingData& data) {
  const int gpu = cuda_device_index(ctx.device);  // throws for an unknown device name
  const TrainConfig tc = train_config_of(config);
  const ModelConfig mc = model_config_of(config, data);
  if (gpu < 0) {
    // Every GEMM of the model splits its rows over the OpenMP team itself (kernels/cpu):
    // OpenBLAS single-threaded for the whole run instead of toggled around each call.
    struct BlasOneThread {
      int saved = openblas_get_num_threads();
      BlasOneThread() { openblas_set_num_threads(1); }
      ~BlasOneThread() { openblas_set_num_threads(saved); }
    } blas_one_thread;
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
