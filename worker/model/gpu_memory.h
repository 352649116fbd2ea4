// How much GPU memory one training cell takes on each of its GPUs, estimated from its
// effective config: what `plan` and `run` check `cells_per_gpu` cells against before
// anything runs (coordinator/run_plan.h: the run plan's gpu_fit). The task says the shape of
// its data (TaskDef::data_shape, the same function its run() reads), model_config_of
// makes the model's config from it, and the model's own plan (worker/model/model_layout.h:
// what the model allocates) gives the buffers this file sums.
//
// The count is the CUDA model's in float32: parameters, their gradients, AdamW's m and
// v (one set on every GPU of a data-parallel cell: each replica updates), the forward's
// saved activations and the backward's scratch (the CUDA path allocates every per-layer
// buffer: batch_layout with every LayerBuffers flag on), the staged
// batch inputs, the attention and reduction workspace, plus a fixed allowance for the
// child's CUDA context and cuBLAS handle. Activations are counted for the whole `batch`
// on every GPU: the test-split evaluation runs the full batch on the first replica.
// Not counted: NCCL's buffers of a multi-device cell, allocator fragmentation.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "worker/model/model_layout.h"

namespace attnsweep {

using json = nlohmann::json;

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
// the `precision` bf16 copies (worker/model/backend_cuda.h).
GpuMemory model_gpu_memory(const ModelConfig& model, int64_t batch, bool adamw, bool bf16 = false);

// One cell's memory on each GPU it trains on, from its effective config; all zero when
// its task trains nothing on a GPU (norm_probe, synthetic).
GpuMemory estimate_gpu_memory(const json& effective_config);

// "12.3 GiB" (one decimal; two below 1 GiB).
std::string format_gib(int64_t bytes);

}  // namespace attnsweep
