// Paper B's read-out (worker/model/model.h Head::readout) in its own algebra, on the CPU: the
// forward and backward of one attention layer whose only query is the prompt's last
// token, in O(L C) a prompt instead of projecting every token.
//
// Per prompt (tokens x_0 .. x_{L-1}, query z = x_L, each C wide) and head h (width
// hd = C / H, rows h hd .. (h+1) hd of Q, K, V in the model's qkv_w (3C, C)):
//   q = Q_h z,  u = K_h^T q / sqrt(hd),  s_n = x_n . u   (= <K_h x_n, Q_h z> / sqrt(hd))
//   p = phi(s) over the L keys (softmax, or element-wise with phi resolved for L keys)
//   m = sum_n p_n x_n,  o_h = V_h m;  the prediction is o_{H-1}'s last coordinate,
//   V's row C - 1 times m; the loss the mean over the batch of (pred - y)^2.
// Backward (head H - 1 alone reaches the loss), with e = 2 (pred - y) / B:
//   dV[C-1] = e m,  dm = e V[C-1],  dp_n = x_n . dm,
//   ds_n = p_n (dp_n - sum_k p_k dp_k) (softmax) or phi'(s_n) dp_n (element-wise),
//   du = sum_n ds_n x_n,  dK_h = q du^T / sqrt(hd),  dQ_h = (K_h du / sqrt(hd)) z^T.
// The norms are those of kernels/attention.h for the one query row of each head.
// The generic path (qkv of every token, attention_forward / _backward on the split
// heads) computes the same function; it stays the oracle of the tests.
//
// Several cells at once: every cell of a call reads the same batch, each with its own
// weights and activation. A cell's values do not depend on which other cells share the
// call, nor on the thread count: the batch is cut into blocks of prompts that depend on
// nothing but the prompt count, each cell's per-block sums are float64, and the blocks
// are added in order. So a cell trained in a group gets the bits it gets alone.
#pragma once

#include <span>

#include "kernels/readout_types.h"

namespace attnsweep {

// The forward: pred, loss and (norms) attn_fro / jac_fro of every cell. x [B, N, C] row-major
// (the model's input), y [B].
void readout_forward_cpu(const ReadoutShape& shape, const float* x, const float* y, std::span<ReadoutCell> cells,
                         bool norms);
// Forward and backward in one pass over each prompt: also every cell's gradient.
void readout_train_cpu(const ReadoutShape& shape, const float* x, const float* y, std::span<ReadoutCell> cells,
                       bool norms);

// Whether the model takes this path on either backend (worker/model/backend.h, worker/model/backend_cuda.h):
// on by default; off from the start with ATTNSWEEP_READOUT_ALGEBRA=0 in the environment
// (the op sequence, the tests' oracle); the tests switch it to compare.
bool readout_algebra_enabled();
void set_readout_algebra(bool on);

}  // namespace attnsweep
