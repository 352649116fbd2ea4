// The CUDA backend's own device memory beside the model's buffers (model_layout.h), as a
// declared plan for a batch of B rows, each buffer a pure function of the model's config:
// the staged batch inputs, a batch made on the device, the bfloat16 copies of the
// attention's operands, the gathered query rows of the masked norms, and the workspace's
// largest request. CudaBackend::reserve (worker/model/backend_cuda.h) allocates it when
// the model is sized for a batch (BasicModel::ensure_batch), so a step grows nothing; the
// GPU memory estimate (worker/model/gpu_memory.h) sums it. The kernels' own facts (which
// head widths are fused, how a column sum is chunked) come from kernels/scratch.h.
#pragma once

#include <cstdint>

#include "worker/model/backend.h"  // kNumInputSlots
#include "worker/model/model_layout.h"

namespace attnsweep {

struct BackendBuffers {
  // Bytes of each staged batch input (InputSlot), on the device and as much pinned on the
  // host; 0: the slot is not used by this model.
  int64_t input[kNumInputSlots] = {};
  // A batch made on the device (CudaBackend::fill_batch): its x and y_value.
  int64_t made[2] = {};
  // Scratch slots (CudaBackend::scratch), each at its largest request: 0-7 the bfloat16
  // copies of q, k, v, o, dO, dq, dk, dv (precision bf16, where the fused kernels take
  // the head width), 8-9 the real query rows and their q, o and lse (the masked norms).
  static constexpr int kScratchSlots = 10;
  int64_t scratch[kScratchSlots] = {};
  // The workspace's largest request (attention, the column sums of the bias and LayerNorm
  // gradients, the losses' and global norm's reductions).
  int64_t workspace_request = 0;
  // Precision bf16: the workspace's bfloat16 copies of a matmul's two inputs (grown on
  // demand, bounded here).
  int64_t bf16_matmul = 0;

  // What each holds once allocated: a scratch slot and the workspace grow to 1.25x a
  // request (CudaBackend::scratch, AttentionCudaWorkspace::reserve).
  static int64_t grown(int64_t request) { return request + request / 4; }
  int64_t inputs_bytes() const;  // input + made
  int64_t workspace_bytes() const { return grown(workspace_request); }
  int64_t bf16_bytes() const;  // the attention copies (scratch 0-7) and bf16_matmul
  int64_t query_rows_bytes() const { return grown(scratch[8]) + grown(scratch[9]); }
};

// `cfg.precision` bf16 adds the bfloat16 copies.
BackendBuffers backend_buffers(const ModelConfig& cfg, int64_t B);

}  // namespace attnsweep
