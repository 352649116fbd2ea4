// The read-out in its own algebra on CUDA: the function of kernels/readout.h (its header
// gives the formulas), for K cells that read the same batch, in two launches: one block
// per (prompt, cell) runs the prompt's forward (and backward) over its L keys, and one
// pass per cell adds the prompts' terms in prompt order, in float64. So, as on the CPU, a
// cell's values do not depend on which other cells share the call, and two runs give the
// same bits; against the CPU they differ by the order of float32 sums (the tests' 1e-5).
// Only with ATTNSWEEP_HAVE_CUDA.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention_cuda.h"
#include "kernels/ops_cuda.h"
#include "kernels/readout_types.h"

namespace attnsweep {

// The cells one call takes (their parameters travel in the launch's arguments).
inline constexpr int64_t kReadoutCudaMaxCells = 16;

// Whether readout_cuda takes this shape and cell count: 1 <= C <= 65, H dividing C,
// N >= 2, 1 <= K <= kReadoutCudaMaxCells, and the L = N - 1 scores and weights of a
// prompt fit in a block's shared memory (2 L floats: L up to about 25,000 on sm_90).
bool readout_cuda_supported(const ReadoutShape& shape, int64_t K);

// cells[0, K): host structs holding device pointers (kernels/readout_types.h); x [B, N, C]
// and y [B] on the device. pred, attn_fro / jac_fro (norms) and, when train, grad (whole,
// overwritten) of every cell. The losses: loss_sums null, each cells[k].loss (the stream
// is synchronised); else loss_sums[k].sum = sum over the batch of (pred - y)^2 and
// .count = 0, on the device, nothing waited for (a step graph), cells[k].loss left as it
// is. Throws std::invalid_argument where !readout_cuda_supported.
void readout_cuda(const ReadoutShape& shape, const float* x, const float* y, ReadoutCell* cells, int64_t K, bool norms,
                  bool train, CudaScalarSum* loss_sums, AttentionCudaWorkspace* ws, cudaStream_t stream);

}  // namespace attnsweep
