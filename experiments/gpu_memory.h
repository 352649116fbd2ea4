// How much GPU memory one training cell takes on each of its GPUs, estimated from its
// effective config: what `plan` and `run` check `cells_per_gpu` cells against before
// anything runs (coordinator/local_slots.h: check_gpu_fit). Next to the task's cost
// estimate (experiments/registry.h: TaskDef::cost_s); the task says the shape of the
// model its data makes (TaskDef::model_shape), this file counts the bytes.
//
// The count follows the CUDA model (worker/model.cpp, worker/backend_cuda.h) in float32,
// buffer by buffer: parameters, their gradients, AdamW's m and v (one set on every GPU
// of a data-parallel cell: each replica updates), the forward's saved activations and
// the backward's scratch (the CUDA path allocates every per-layer buffer), the staged
// batch inputs, the attention and reduction workspace, plus a fixed allowance for the
// child's CUDA context and cuBLAS handle. Activations are counted for the whole `batch`
// on every GPU: the test-split evaluation runs the full batch on the first replica.
// Not counted: NCCL's buffers of a multi-device cell, allocator fragmentation.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace attnsweep {

using json = nlohmann::json;

// The model a training cell builds (worker/model.h ModelConfig), as far as memory goes:
// the dims its task's data gives the trainer (experiments/task.h TrainingData) and the
// model keys.
struct ModelShape {
  enum class Head { classify, readout, token_regress } head = Head::classify;
  int64_t tokens = 0;   // N tokens per sample (before a CLS token)
  int64_t in_dim = 0;   // features per token (1 with vocab > 0)
  int64_t vocab = 0;    // > 0: token ids embedded by a table
  int64_t classes = 0;  // classify only
  bool cls = false;     // a CLS token in front (T = N + 1)
  bool padded = false;  // a key mask over padding tokens
  int64_t dim = 0, layers = 0, heads = 0, mlp_ratio = 0;

  int64_t seq() const { return tokens + (cls ? 1 : 0); }
};

// The transformer of `cfg` (its dim, layers, heads, mlp_ratio, and cls when the task has
// the key) over data of these dims; classes 0: per-token regression (token_regress).
ModelShape transformer_shape(const json& cfg, int64_t tokens, int64_t in_dim, int64_t classes, int64_t vocab = 0,
                             bool padded = false);
// Paper B's read-out: one attention layer, one head of `width` over `tokens` tokens.
ModelShape readout_shape(int64_t tokens, int64_t width);

// Bytes on one GPU, by what holds them.
struct GpuMemory {
  int64_t context = 0;      // the child's CUDA context and cuBLAS handle (a fixed allowance)
  int64_t parameters = 0;   // float32 weights
  int64_t gradients = 0;    // one float per weight
  int64_t optimizer = 0;    // AdamW's m and v (SGD keeps none)
  int64_t activations = 0;  // saved forward tensors, backward scratch and the norms, for `batch` rows
  int64_t inputs = 0;       // the batch's inputs, targets and key mask on the device
  int64_t workspace = 0;    // attention and reduction scratch (grown to 1.25x the largest request)
  int64_t bf16_copies = 0;  // precision bf16: the bfloat16 copies of the matmul and attention inputs
  int64_t total() const {
    return context + parameters + gradients + optimizer + activations + inputs + workspace + bf16_copies;
  }
};

// The allowance for one process's CUDA context and cuBLAS handle: an assumption (typical
// of CUDA 12 on Hopper), not measured by this project.
constexpr int64_t kCudaContextBytes = int64_t{512} << 20;

// The model's memory at `batch` rows; adamw: with AdamW's state (else SGD); bf16: with
// the `precision` bf16 copies (worker/backend_cuda.h).
GpuMemory model_gpu_memory(const ModelShape& shape, int64_t batch, bool adamw, bool bf16 = false);

// One cell's memory on each GPU it trains on, from its effective config; all zero when
// its task trains nothing on a GPU (norm_probe, synthetic).
GpuMemory estimate_gpu_memory(const json& effective_config);

// "12.3 GiB" (one decimal; two below 1 GiB).
std::string format_gib(int64_t bytes);

}  // namespace attnsweep
