// The GPU memory estimate (worker/model/gpu_memory.h): the CUDA model's plan
// (worker/model/model_layout.h) and the backend's own (worker/model/device_memory.h) summed.
#include "worker/model/gpu_memory.h"

#include <algorithm>
#include <cstdio>

#include "experiments/registry.h"
#include "worker/model/device_memory.h"

namespace attnsweep {

namespace {
constexpr int64_t kFloat = 4, kDouble = 8;
}  // namespace

GpuMemory model_gpu_memory(const ModelConfig& shape, int64_t batch, bool adamw, bool bf16) {
  GpuMemory m;
  const int64_t p = parameter_floats(parameter_layout(shape));
  // Every per-layer buffer: the CUDA backend's layer_buffers.
  const BatchLayout acts = batch_layout(shape, batch, LayerBuffers{});
  m.context = kCudaContextBytes;
  m.parameters = p * kFloat;
  m.gradients = p * kFloat;
  m.optimizer = adamw ? 2 * p * kFloat : 0;
  m.activations = acts.floats() * kFloat + acts.norms * kDouble;
  ModelConfig planned = shape;
  planned.precision = bf16 ? Precision::bf16 : Precision::fp32;
  const BackendBuffers be = backend_buffers(planned, batch);
  m.inputs = be.inputs_bytes();
  m.workspace = be.workspace_bytes() + be.query_rows_bytes();
  m.bf16_copies = be.bf16_bytes();
  return m;
}

GpuMemory estimate_gpu_memory(const json& cfg) {
  const TaskDef* t = task_of(cfg);
  if (t == nullptr || t->data_shape == nullptr) return {};
  // precision is absent at its default (fp32): experiments/training_keys.cpp.
  const ModelConfig model = model_config_of(t->model_config ? t->model_config(cfg) : cfg, t->data_shape(cfg));
  return model_gpu_memory(model, cfg.at("batch").get<int64_t>(), cfg.at("optimizer").get<std::string>() == "adamw",
                          cfg.value("precision", "fp32") == "bf16");
}

std::string format_gib(int64_t bytes) {
  const double gib = static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30);
  char buf[32];
  std::snprintf(buf, sizeof buf, gib < 1 ? "%.2f GiB" : "%.1f GiB", gib);
  return buf;
}

}  // namespace attnsweep
