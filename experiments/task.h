// A task turns an effective cell config into metrics and datasets. Tasks know nothing
// of files, MPI or slots: the worker writes what they return.
#pragma once

#include "base/errors.h"
#include "experiments/cell_status.h"
#include "kernels/activation.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace attnsweep {

using json = nlohmann::json;

struct TaskOutput;
struct TrainingData;

// The trained model's parameter tensors by name, read-only (worker/model/model.h: "qkv_w"
// (L, 3C, C), ...), for a task's own measurements of the weights.
struct ModelWeights {
  struct Tensor {
    const float* data = nullptr;
    std::vector<int64_t> shape;
  };
  std::map<std::string, Tensor> tensors;
};

// A number a training task measures on the model at every evaluation of the test split
// (the trajectory `path`, one row per /eval/step) and at the end (final metric `name`).
struct EvalMetric {
  std::string name;  // "limit_sq_error"
  std::string path;  // "/icl/limit_sq_error"
  std::string description;
};

struct TaskContext {
  std::string device = "cpu";
  int threads = 1;
  int attempt = 1;                         // 1 for the first try of a cell
  const std::atomic<int>* stop = nullptr;  // nonzero: a signal asked us to stop
  bool stop_requested() const { return stop && stop->load() != 0; }
  // Where a training task keeps its checkpoint ("" = none: a stop ends without one).
  // Under `run` it is DIR/checkpoints/<cell id>.ckpt.
  std::string checkpoint_path;
  std::string cell_id;  // the cell's id ("" when not known)
  // Told after each training step: the steps done, the cell's steps and that step's
  // loss (the worker reports them every few seconds: worker/training/progress.h). May be empty.
  std::function<void(int64_t step, int64_t steps, double loss)> progress;
  void report_progress(int64_t step, int64_t steps, double loss) const {
    if (progress) progress(step, steps, loss);
  }
  // Trains a model on a training task's data. Supplied by the worker (worker/training/trainer.h):
  // tasks sit below the trainer (app -> worker -> experiments), so a training task
  // loads its data and hands it to this instead of calling the trainer by name.
  std::function<TaskOutput(const json& config, const TaskContext& ctx, const TrainingData& data)> train;
};

// What a training task's samples are to the model, stated once by the task as a function
// of the cell's config (experiments/registry.h TaskDef::data_shape): its run() hands the
// trainer data of this shape, and the GPU memory estimate (worker/model/gpu_memory.h) builds the
// model's config from it without loading any data.
struct DataShape {
  int64_t tokens = 0;   // N tokens per sample, as the model sees them (before any CLS)
  int64_t in_dim = 0;   // features per token
  int64_t classes = 0;  // 0: regression (one float target, MSE)
  int64_t vocab = 0;    // > 0: x holds token ids in [0, vocab) as floats (in_dim 1)
  // Regression: floats of y_value per sample. 1: one per sample; == tokens: one per
  // token (per-token regression, the pde task's u(x_j, T)).
  int64_t targets_per_sample = 1;
  // With vocab > 0: the id of padding tokens (-1: none). The model hides them from
  // attention with a key mask; pad at the end of a sequence.
  int64_t pad_id = -1;
};

// What a training task gives the trainer: token features x [count, tokens, in_dim] and
// targets, filled for any list of sample indices (classes in [0, classes) for
// classification; one float per sample for regression, classes == 0), of its DataShape.
struct TrainingData : DataShape {
  int64_t n_train = 0, n_test = 0;
  // split 0 = train, 1 = test. x: [count, tokens, in_dim]; y_class [count] or y_value
  // [count, targets_per_sample] (the one that applies).
  std::function<void(int split, const int64_t* idx, int64_t count, float* x, int32_t* y_class, float* y_value)> fill;
  // Optional, CUDA only: the training split's samples made on the device, the same bits as
  // fill's. idx [count] and x, y_value as fill's, all in device memory; stream is the
  // cudaStream_t to queue the work on (inside a step graph's capture too: no host waits, no
  // allocation). A CUDA cell then never makes its training batches on the host.
  std::function<void(const int64_t* idx, int64_t count, float* x, float* y_value, void* stream)> fill_device;
  // Optional: the task's own metrics, measured from the current weights at every
  // evaluation (steps = 0: once, at initialisation); measure returns one value per entry
  // of eval_metrics, in order.
  std::vector<EvalMetric> eval_metrics;
  std::function<std::vector<double>(const ModelWeights& weights)> measure;
};

struct TaskSeries {
  std::string path;             // "/probe/attn_fro"
  std::vector<uint64_t> shape;  // row-major; product == number of elements
  using Data = std::variant<std::vector<float>, std::vector<double>, std::vector<int64_t>>;
  Data data;
  std::string description;
};

struct TaskOutput {
  CellStatus status = CellStatus::complete;  // complete | diverged | interrupted
  int64_t diverged_at_step = -1;
  int64_t stopped_at_step = -1;  // interrupted: the step a training task stopped before (-1: not known)
  std::map<std::string, double> final_metrics;
  std::vector<TaskSeries> series;
};

// Runs the cell's task. Throws std::runtime_error on failure.
TaskOutput run_task(const json& config, const TaskContext& ctx);

TaskOutput run_norm_probe(const json& config, const TaskContext& ctx);
TaskOutput run_synthetic(const json& config, const TaskContext& ctx);
// The grid's own program (experiments/command.h).
TaskOutput run_command(const json& config, const TaskContext& ctx);

// docs/command-line.md's exit code of a run or cell interrupted by a signal, resumable.
inline constexpr int kExitInterrupted = 75;
// `attnsweep train`'s exit code for a failure another attempt would repeat (a command
// cell's malformed metrics line): the cell fails without its retries.
inline constexpr int kExitFailedNoRetry = 65;
// A task throws a DeterministicError, an InputError or an InternalError (base/errors.h)
// for such a failure; run_cell exits kExitFailedNoRetry with its message.
// A command cell's metrics lines live next to its checkpoint, at checkpoint + this, so the
// steps logged before a requeue are kept; removed with the checkpoint once the result is written.
inline constexpr const char kCommandMetricsSuffix[] = ".metrics.jsonl";
// Fashion-MNIST classification (experiments/image.cpp); needs ctx.train.
TaskOutput run_image(const json& config, const TaskContext& ctx);
// Paper B's in-context linear regression (experiments/icl_regression.h); needs ctx.train.
TaskOutput run_icl_regression(const json& config, const TaskContext& ctx);
// Long Range Arena's ListOps, generated (experiments/listops.cpp); needs ctx.train.
TaskOutput run_listops(const json& config, const TaskContext& ctx);
// Burgers' solution operator u(., 0) -> u(., T) (experiments/pde.cpp); needs ctx.train.
TaskOutput run_pde(const json& config, const TaskContext& ctx);

// Patch size of the image task for a prompt length (16 -> 7, 49 -> 4, 196 -> 2,
// 784 -> 1); 0 for any other length.
int64_t image_patch_size(int64_t prompt_length);

}  // namespace attnsweep
