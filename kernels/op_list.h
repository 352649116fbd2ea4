// The plain ops: the ops of kernels/ops.h and kernels/model_ops.h that both model
// backends (worker/model/backend.h CpuBackend, worker/model/backend_cuda.h CudaBackend) forward one to
// one, each as a member `name` with the CPU argument order that calls the free function
// `name` (CPU) or `name##_cuda` (CUDA, kernels/ops_cuda.h and kernels/model_ops_cuda.h)
// with the backend's trailing arguments added. One X-macro, ATTNSWEEP_PLAIN_OPS(X, X_WS),
// applies X or X_WS to each op's name; the two kinds differ on CUDA only:
// - X(name):    name_cuda(args..., stream)
// - X_WS(name): name_cuda(args..., workspace, stream): the op needs the backend's
//               AttentionCudaWorkspace (its cuBLAS handle or device scratch).
// Adding an op here is what makes both backends forward it (declare `name` and
// `name_cuda` first) and what makes tests/unit/test_ops_cuda.cpp require a CPU-vs-CUDA
// check of it: its TEST(CrossBackendOps, name) calls check_name(), which must exist (or
// it does not compile), and the count test wants a row for it in the table of checks.
// Not here, because a backend writes them out by hand: the composite ops
// (matmul_residual_forward, attention_block_*, layer_*_fused, readout_fused, ...), the
// ops whose CUDA version is more than a forward (the two losses' forwards, global_norm,
// adamw_update, sgd_update: host values, or a step graph's device scalars), and the
// attention kernels. The concept ModelBackend (worker/model/backend.h) states the signatures the
// model calls; an op the model calls goes there too.
#pragma once

#define ATTNSWEEP_PLAIN_OPS(X, X_WS) \
  /* kernels/ops.h */                \
  X_WS(matmul_forward)               \
  X_WS(matmul_backward)              \
  X(layernorm_forward)               \
  X_WS(layernorm_backward)           \
  X(gelu_forward)                    \
  X(gelu_backward)                   \
  X(residual_forward)                \
  X(meanpool_forward)                \
  X(meanpool_backward)               \
  X(softmax_crossentropy_backward)   \
  X(mse_backward)                    \
  X(embedding_forward)               \
  X(embedding_backward)              \
  /* kernels/model_ops.h */          \
  X(split_heads)                     \
  X(merge_heads)                     \
  X(heads_to_rows)                   \
  X(rows_to_heads)                   \
  X(tokens_forward)                  \
  X(tokens_backward)                 \
  X(cls_pool_forward)                \
  X(cls_pool_backward)               \
  X(masked_meanpool_forward)         \
  X(masked_meanpool_backward)        \
  X(readout_split)                   \
  X(readout_merge)                   \
  X(readout_pick)                    \
  X(readout_pick_backward)           \
  X(scale_inplace)
