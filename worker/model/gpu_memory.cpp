// The GPU memory estimate (worker/model/gpu_memory.h): the CUDA model's plan
// (worker/model/model_layout.h) summed, plus what the backend holds beside the model.
#include "worker/model/gpu_memory.h"

#include <algorithm>
#include <cstdio>

#include "experiments/registry.h"

namespace attnsweep {

namespace {

constexpr int64_t kFloat = 4, kDouble = 8, kInt32 = 4, kInt64 = 8;

// The batch on the device (CudaBackend::input): x or the token ids, the targets, the mask;
// and a batch made on the device.
int64_t input_bytes(const ModelConfig& s, int64_t B) {
  const int64_t N = s.tokens;
  int64_t b = s.vocab > 0 ? B * N * kInt32 : B * N * s.in_dim * kFloat;
  if (s.head == Head::classify)
    b += B * kInt32;
  else
    b += B * (s.head == Head::token_regress ? N : 1) * kFloat;
  if (s.pad_id >= 0) b += B * s.seq() * kFloat;
  // Float features and targets: the batch may also be made on the device
  // (CudaBackend::fill_batch), from B sample indices into buffers of its own.
  if (s.vocab == 0 && s.head != Head::classify) b += B * kInt64 + b;
  return b;
}

// Largest scratch request on the backend's workspace (kernels/cuda: the attention
// forward and backward, the column sums of the bias and LayerNorm gradients, the loss
// and global-norm reductions), grown to 1.25x it (AttentionCudaWorkspace::reserve).
int64_t workspace_bytes(const ModelConfig& s, int64_t B) {
  const bool readout = s.head == Head::readout;
  const int64_t H = readout ? 1 : s.heads, hd = s.dim / std::max<int64_t>(H, 1);
  const int64_t Nq = readout ? 1 : s.seq(), Nk = readout ? s.tokens - 1 : s.seq();
  const int64_t BH = B * H;
  int64_t need = 0;
  const bool fused = hd == 16 || hd == 32 || hd == 64 || hd == 128;  // attention_cuda_fused_supported
  if (fused) {
    need = std::max(need, 2 * BH * Nq * kDouble + B * Nk * kInt32);  // forward: row norms, key prefix
    need = std::max(need, BH * Nq * kFloat + B * Nk * kInt32);       // backward: D_i, key prefix
  } else {
    // The materialising path: the score matrix (forward), scores and dP (backward).
    need = std::max(need, BH * Nq * Nk * kFloat + 2 * BH * Nq * kDouble + B * Nk * kInt32);
    need = std::max(need, 2 * BH * Nq * Nk * kFloat + B * Nk * kInt32);
  }
  if (!readout) {
    // launch_colsum (kernels/cuda/reduce.cuh): partials of NOUT x chunks x OC doubles, at most
    // 256 chunks of >= 64 rows and 2^22 doubles.
    const int64_t C = s.dim, T = s.seq(), F = s.mlp_ratio * s.dim;
    const int64_t K = s.head == Head::token_regress ? 1 : s.classes;
    const int64_t head_rows = s.head == Head::token_regress ? B * s.tokens : B;
    auto colsum = [](int64_t rows, int64_t oc, int64_t nout) {
      if (rows <= 0 || oc <= 0) return int64_t{0};
      const int64_t max_chunks = std::clamp<int64_t>((int64_t{1} << 22) / (oc * nout), 1, 256);
      int64_t chunks = std::min<int64_t>((rows + 63) / 64, max_chunks);
      const int64_t chunk_rows = (rows + chunks - 1) / chunks;
      chunks = (rows + chunk_rows - 1) / chunk_rows;
      return nout * chunks * oc * kDouble;
    };
    for (int64_t b : {colsum(B * T, 3 * C, 1), colsum(B * T, C, 1), colsum(B * T, F, 1), colsum(B * T, C, 2),
                      colsum(B * s.tokens, C, 1), colsum(head_rows, K, 1)})
      need = std::max(need, b);
  }
  need = std::max(need, B * (kDouble + kInt32) + 64);  // softmax cross-entropy per row
  need = std::max(need, 1024 * kDouble + 64);          // sum of squares (global norm, MSE)
  return need + need / 4;
}

// Precision bf16 (kernels/cuda/matmul.cu, worker/model/backend_cuda.cpp): the workspace keeps a
// bfloat16 copy of each of a matmul's two inputs (each slot grown to the largest: at most
// max(rows, weight rows) x the widest side), and the backend keeps eight bfloat16 copies
// of the attention's operands where the fused kernels take the head width (Q, K, V, O, dO
// and dQ, dK, dV of self-attention: B H T hd each), grown to 1.25x.
int64_t bf16_copy_bytes(const ModelConfig& s, int64_t B) {
  constexpr int64_t kBf16 = 2;
  const bool readout = s.head == Head::readout;
  const int64_t C = s.dim, T = readout ? s.tokens : s.seq(), F = readout ? 3 * C : s.mlp_ratio * s.dim;
  const int64_t widest = std::max({3 * C, F, C, s.in_dim, s.classes});
  const int64_t rows = B * T;
  int64_t b = 2 * std::max(rows, widest) * widest * kBf16;
  const int64_t H = readout ? 1 : s.heads, hd = s.dim / std::max<int64_t>(H, 1);
  if (!readout && (hd == 16 || hd == 32 || hd == 64 || hd == 128)) b += 8 * (B * H * T * hd * kBf16) * 5 / 4;
  return b;
}

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
  m.inputs = input_bytes(shape, batch);
  m.workspace = workspace_bytes(shape, batch);
  m.bf16_copies = bf16 ? bf16_copy_bytes(shape, batch) : 0;
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
