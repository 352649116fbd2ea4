// The training loop of one cell, step by step (worker/training/train_cell.h train_cell): checkpoints and
// their resume, the stop at a step boundary, the batch of each step (from a seeded sampler,
// made in line or one step ahead), logging, divergence, evaluations and the task's own
// metrics, and the cell's TaskOutput at the end. A template over the trainer (CPU or CUDA:
// worker/training/trainer.h). train_cell runs one CellLoop; a group of alike cells
// (worker/training/cell_group.h) runs several in lockstep, and cells that draw the same data share
// each step's batch: a loop does not care where its batch was made.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <future>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "experiments/result_schema.h"
#include "experiments/rng.h"
#include "worker/training/checkpoint.h"
#include "worker/training/prefetch.h"
#include "worker/training/trainer.h"

namespace attnsweep {

namespace cell_loop_detail {

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
inline double sum_rel_l2(const float* pred, const float* y, int64_t B, int64_t per) {
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

}  // namespace cell_loop_detail

template <class TrainerT>
class CellLoop {
 public:
  CellLoop(TrainerT& tr, const TrainConfig& tc, const ModelConfig& mc, const json& config, const TaskContext& ctx,
           const TrainingData& data)
      : tr_(tr),
        tc_(tc),
        mc_(mc),
        ctx_(ctx),
        data_(data),
        config_text_(config.dump()),
        sampler_(data.n_train, tc.seed) {
    if (!ctx.checkpoint_path.empty()) {
      std::string why;
      if (load_checkpoint(ctx.checkpoint_path, config_text_, tr, st_, &why)) {
        std::fprintf(stderr, "attnsweep train: resuming from %s at step %lld\n", ctx.checkpoint_path.c_str(),
                     static_cast<long long>(st_.step));
      } else if (why != "absent") {
        std::fprintf(stderr, "attnsweep train: ignoring checkpoint %s (%s); starting from step 0\n",
                     ctx.checkpoint_path.c_str(), why.c_str());
      }
    }
    const int64_t B = tc.batch;
    x_.resize(static_cast<size_t>(B * data.tokens * data.in_dim));
    yc_.resize(static_cast<size_t>(B));
    yv_.resize(static_cast<size_t>(B * mc.targets_per_sample()));
    line_.x.resize(x_.size());
    line_.y_class.resize(yc_.size());
    line_.y_value.resize(yv_.size());
    line_.idx.resize(static_cast<size_t>(B));
    if constexpr (kHostAhead) ahead_.emplace([this](int64_t cursor, HostBatch& b) { make(cursor, b); }, line_);
    resumed_at_ = st_.step;
  }
  CellLoop(const CellLoop&) = delete;
  CellLoop& operator=(const CellLoop&) = delete;

  // At the boundary before the next step: the checkpoint due there, and a requested stop
  // (then the cell ends interrupted). True when a step is to run.
  bool next() {
    if (done_ || st_.step >= tc_.steps) return false;
    const int64_t t = st_.step;
    const bool stop = ctx_.stop_requested();
    if (!ctx_.checkpoint_path.empty() &&
        (stop || (tc_.checkpoint_every > 0 && t % tc_.checkpoint_every == 0 && t != resumed_at_))) {
      finish_measure();  // the trajectory in the checkpoint is complete up to t
      save_checkpoint(ctx_.checkpoint_path, config_text_, tc_, tr_, st_);
    }
    if (stop) {
      out_.status = CellStatus::interrupted;
      out_.stopped_at_step = t;
      done_ = true;
      return false;
    }
    return true;
  }
  int64_t step() const { return st_.step; }
  int64_t cursor() const { return st_.samples_seen; }
  // Whether the next step logs (and so collects the norms).
  bool logging() const { return st_.step % tc_.log_every == 0 || st_.step == tc_.steps - 1; }

  // The batch of the next step: `shared` (another loop's batch at this cursor from the
  // same data) or, when null, the one made here. The cursor moves on either way.
  const HostBatch& take_batch(const HostBatch* shared) {
    const int64_t B = tc_.batch;
    const HostBatch* b = shared;
    if (!b) {
      if (ahead_) {
        // Nothing is made ahead for a step that will not run (the emulated device found
        // the host making steps + 1 batches).
        const bool last = st_.step + 1 >= tc_.steps;
        b = &ahead_->take(st_.samples_seen, last ? -1 : st_.samples_seen + B);
      } else {
        make(st_.samples_seen, line_);
        b = &line_;
      }
    }
    st_.samples_seen += B;
    return *b;
  }

  // After the step's update (or its non-finite result): the log row, divergence, an
  // evaluation when due.
  void after_step(const TrainStepResult& r) {
    const int64_t t = st_.step, L = mc_.layers, H = mc_.heads;
    const bool log = logging();
    Trajectory& tj = st_.traj;
    if (log || !r.finite) {
      tj.step.push_back(t);
      tj.loss.push_back(static_cast<float>(r.fwd.loss));
      tj.accuracy.push_back(
          data_.classes > 0 ? static_cast<float>(static_cast<double>(r.fwd.correct) / static_cast<double>(tc_.batch))
                            : kNaN);
      tj.lr.push_back(static_cast<float>(r.lr));
      tj.grad_norm.push_back(static_cast<float>(r.grad_norm));
      for (int64_t i = 0; i < L * H; ++i) {
        tj.attn_fro.push_back(log ? static_cast<float>(r.fwd.attn_fro[static_cast<size_t>(i)]) : kNaN);
        tj.jac_fro.push_back(log ? static_cast<float>(r.fwd.jac_fro[static_cast<size_t>(i)]) : kNaN);
      }
    }
    if (!r.finite) {
      out_.status = CellStatus::diverged;
      out_.diverged_at_step = t;
      done_ = true;
      return;
    }
    if (tc_.eval_every > 0 && (t + 1) % tc_.eval_every == 0) record_eval(t + 1);
    ++st_.step;
    ctx_.report_progress(st_.step, tc_.steps, r.fwd.loss);
  }

  // The cell's output once next() said no: interrupted (nothing else), or the final
  // evaluation, the final metrics and every series.
  TaskOutput finish() {
    if (out_.status == CellStatus::interrupted) return out_;
    Trajectory& tj = st_.traj;
    const int64_t L = mc_.layers, H = mc_.heads;
    const bool classify = data_.classes > 0;
    if (out_.status == CellStatus::complete) {
      if (tj.eval_step.empty() || tj.eval_step.back() != tc_.steps) record_eval(tc_.steps);
    }
    finish_measure();
    TaskOutput& out = out_;
    if (out.status == CellStatus::complete) {
      out.final_metrics["test_loss"] = tj.eval_loss.back();
      if (classify)
        out.final_metrics["test_accuracy"] = tj.eval_accuracy.back();
      else
        out.final_metrics["test_mse"] = tj.eval_loss.back();
      if (mc_.head == Head::token_regress) out.final_metrics["test_rel_l2"] = last_rel_l2_;
    } else {
      // The parameters are those before the non-finite step; the cell's verdict is the
      // divergence, not a test score of weights it never finished training.
      out.final_metrics["test_loss"] = std::nan("");
      if (classify) out.final_metrics["test_accuracy"] = std::nan("");
      if (mc_.head == Head::token_regress) out.final_metrics["test_rel_l2"] = std::nan("");
    }
    // The task's own metrics: the last evaluation's values (NaN when the cell diverged).
    const size_t M = data_.measure ? data_.eval_metrics.size() : 0;
    for (size_t j = 0; j < M; ++j)
      out.final_metrics[data_.eval_metrics[j].name] =
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
      out.series.push_back({data_.eval_metrics[j].path, {E}, std::move(col), data_.eval_metrics[j].description});
    }
    return out;
  }

 private:
  // The training batch at a sampler cursor; made one step ahead on a host thread where
  // the backend's step leaves the host waiting (CUDA), in line otherwise (the CPU's step
  // uses every core).
  static constexpr bool kHostAhead = TrainerT::ModelType::BackendType::kPrefetchBatches;
  static constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

  // Where the backend makes training batches itself (fills_batches: CUDA with the task's
  // fill_device), only the sample indices: the step hands them over (train_loop).
  void make(int64_t cursor, HostBatch& b) {
    sampler_.indices(cursor, tc_.batch, b.idx.data());
    if (!device_batches_) data_.fill(0, b.idx.data(), tc_.batch, b.x.data(), b.y_class.data(), b.y_value.data());
  }

  void add_measured(const std::vector<double>& v) {
    if (v.size() != data_.eval_metrics.size())
      throw std::runtime_error("task measured " + std::to_string(v.size()) + " metrics, declared " +
                               std::to_string(data_.eval_metrics.size()));
    st_.traj.eval_task.insert(st_.traj.eval_task.end(), v.begin(), v.end());
  }
  void finish_measure() {
    if (measuring_.valid()) add_measured(measuring_.get());
  }
  // The task's own metrics of an evaluation (TrainingData::measure, e.g. paper B's float64
  // limit error): where the host would otherwise wait on the device (CUDA), computed on a
  // host thread from a host copy of the parameters while training goes on, and added to
  // the trajectory, in order, before the next evaluation, a checkpoint or the end.
  void record_eval(int64_t step) {
    if (ahead_) ahead_->wait();  // the data source, one caller at a time
    const cell_loop_detail::EvalResult e = cell_loop_detail::evaluate(tr_.model(), data_, tc_, x_, yc_, yv_);
    Trajectory& tj = st_.traj;
    last_rel_l2_ = e.rel_l2;
    tj.eval_step.push_back(step);
    tj.eval_loss.push_back(static_cast<float>(e.loss));
    tj.eval_accuracy.push_back(static_cast<float>(e.accuracy));
    if (data_.measure) {
      // The task reads host parameters: a device trainer's are copied back first.
      std::vector<float> host = tr_.params_host();
      if constexpr (kHostAhead) {
        finish_measure();
        measuring_ = std::async(std::launch::async, [this, tensors = tr_.model().tensors(), host = std::move(host)] {
          return data_.measure(weights_of(tensors, host.data()));
        });
      } else {
        add_measured(data_.measure(weights_of(tr_.model().tensors(), host.data())));
      }
    }
  }

  TrainerT& tr_;
  const bool device_batches_ = tr_.model().backend().fills_batches();
  const TrainConfig& tc_;
  const ModelConfig& mc_;
  const TaskContext& ctx_;
  const TrainingData& data_;
  const std::string config_text_;
  cell_loop_detail::Sampler sampler_;
  TrainState st_;
  TaskOutput out_;
  int64_t resumed_at_ = 0;
  bool done_ = false;
  double last_rel_l2_ = std::nan("");
  std::vector<float> x_, yv_;  // evaluation batches
  std::vector<int32_t> yc_;
  HostBatch line_;
  std::optional<BatchPrefetcher> ahead_;
  std::future<std::vector<double>> measuring_;
};

// The training loop of one cell on a built trainer of any backend: one CellLoop, one
// step a batch (train_cell, train_cell_cuda).
template <class TrainerT>
TaskOutput train_loop(TrainerT& tr, const TrainConfig& tc, const ModelConfig& mc, const json& config,
                      const TaskContext& ctx, const TrainingData& data) {
  CellLoop<TrainerT> loop(tr, tc, mc, config, ctx, data);
  while (loop.next()) {
    const HostBatch& b = loop.take_batch(nullptr);
    loop.after_step(
        tr.step(b.x.data(), b.y_class.data(), b.y_value.data(), tc.batch, loop.step(), loop.logging(), b.idx.data()));
  }
  return loop.finish();
}

}  // namespace attnsweep
