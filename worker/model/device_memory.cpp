#include "worker/model/device_memory.h"

#include <algorithm>

#include "kernels/real_query_norms.h"
#include "kernels/scratch.h"

namespace attnsweep {
namespace {

constexpr int64_t kFloat = 4, kInt32 = 4, kInt64 = 8, kBf16 = 2;

// The batch on the device (CudaBackend::input): x or the token ids, the targets, the key
// mask; and, for float features and targets, a batch the device may make itself
// (CudaBackend::fill_batch) from B sample indices into buffers of its own.
void inputs(const ModelConfig& s, int64_t B, BackendBuffers& b) {
  const int64_t N = s.tokens;
  if (s.vocab > 0)
    b.input[kInputIds] = B * N * kInt32;
  else
    b.input[kInputX] = B * N * s.in_dim * kFloat;
  if (s.head == Head::classify)
    b.input[kInputYClass] = B * kInt32;
  else
    b.input[kInputYValue] = B * (s.head == Head::token_regress ? N : 1) * kFloat;
  if (s.pad_id >= 0) b.input[kInputMask] = B * s.seq() * kFloat;
  if (s.vocab == 0 && s.head != Head::classify) {
    b.input[kInputSampleIds] = B * kInt64;
    b.made[0] = b.input[kInputX];
    b.made[1] = b.input[kInputYValue];
  }
}

// The largest request on the backend's workspace: the attention forward and backward
// (kernels/cuda), the column sums of the bias and LayerNorm gradients (kernels/scratch.h
// colsum_chunks), the loss and global-norm reductions.
int64_t workspace_request(const ModelConfig& s, int64_t B) {
  const bool readout = s.head == Head::readout;
  const int64_t H = readout ? 1 : s.heads, hd = s.dim / std::max<int64_t>(H, 1);
  const int64_t Nq = readout ? 1 : s.seq(), Nk = readout ? s.tokens - 1 : s.seq();
  int64_t need = 0;
  for (bool backward : {false, true})
    need = std::max(need, static_cast<int64_t>(attention_scratch_bytes(B, H, Nq, Nk, hd, backward)));
  if (!readout) {
    const int64_t C = s.dim, T = s.seq(), F = s.mlp_ratio * s.dim;
    const int64_t K = s.head == Head::token_regress ? 1 : s.classes;
    const int64_t head_rows = s.head == Head::token_regress ? B * s.tokens : B;
    auto colsum = [](int64_t rows, int64_t oc, int64_t nout) {
      return colsum_chunks(rows, oc, nout).scratch_bytes(oc, nout);
    };
    for (int64_t b : {colsum(B * T, 3 * C, 1), colsum(B * T, C, 1), colsum(B * T, F, 1), colsum(B * T, C, 2),
                      colsum(B * s.tokens, C, 1), colsum(head_rows, K, 1)})
      need = std::max(need, b);
  }
  auto at_least = [&](size_t bytes) { need = std::max(need, static_cast<int64_t>(bytes)); };
  if (s.head == Head::classify) at_least(scratch_bytes<XentScratch>(B, true));  // softmax cross-entropy
  at_least(scratch_bytes<SumSquaresScratch>(kMaxSumSquaresBlocks, true));       // global norm, MSE
  // The read-out in its own algebra (readout_cuda), one cell: a group's cells on one
  // backend (BasicModel::readout_together) take K times its share and grow it.
  if (readout) at_least(scratch_bytes<ReadoutScratch>(B, s.dim, s.heads, 1, true));
  return need;
}

}  // namespace

int64_t BackendBuffers::inputs_bytes() const {
  int64_t b = made[0] + made[1];
  for (int64_t i : input) b += i;
  return b;
}

int64_t BackendBuffers::bf16_bytes() const {
  int64_t b = bf16_matmul;
  for (int i = 0; i < 8; ++i) b += grown(scratch[i]);
  return b;
}

BackendBuffers backend_buffers(const ModelConfig& s, int64_t B) {
  BackendBuffers b;
  inputs(s, B, b);
  b.workspace_request = workspace_request(s, B);
  const bool readout = s.head == Head::readout;
  const int64_t H = readout ? 1 : s.heads, hd = s.dim / std::max<int64_t>(H, 1);
  const int64_t T = readout ? s.tokens : s.seq();
  // The masked norms (CudaBackend::norms_of_real_queries): the real query rows of every
  // sample (up to B T), then one sample's q and o rows and lse for every head.
  if (s.pad_id >= 0 && !readout) {
    b.scratch[8] = real_query_rows_bytes(B * T);
    b.scratch[9] = real_query_buf_bytes(H, T, hd);
  }
  if (s.precision == Precision::bf16) {
    // The matmuls: a bfloat16 copy of each of its two inputs, each grown to the largest (at
    // most max(rows, weight rows) x the widest side).
    const int64_t C = s.dim, F = readout ? 3 * C : s.mlp_ratio * s.dim;
    const int64_t widest = std::max({3 * C, F, C, s.in_dim, s.classes});
    b.bf16_matmul = 2 * std::max(B * T, widest) * widest * kBf16;
    // The attention's operands where the fused kernels take the head width (self-attention:
    // B H T hd each).
    if (!readout && attention_fused_head_width(hd))
      for (int i = 0; i < 8; ++i) b.scratch[i] = B * H * T * hd * kBf16;
  }
  return b;
}

}  // namespace attnsweep
