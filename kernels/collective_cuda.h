// The gradient all-reduce of data-parallel CUDA training: NCCL, loaded on first use
// (kernels/cuda/nccl_lazy.cu dlopens libnccl.so.2, as cublas_lazy.cu does for cuBLAS),
// so neither the build nor a CPU-only process needs NCCL. Single process, k devices:
// one communicator per device (ncclCommInitAll), driven from one host thread with a
// group call. NCCL's ring / tree order is fixed for a fixed topology and NCCL version,
// and every rank receives the same reduced bits, so the replicas stay identical and a
// run is deterministic; the sum is float32 in NCCL's order (not the CPU path's float64
// in replica order). Errors throw std::runtime_error naming the call and NCCL's reason.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace attnsweep {

struct NcclComms;

// Loads NCCL if needed; "" when usable, else why not (library not found, symbol missing).
// The library: $ATTNSWEEP_NCCL_LIBRARY, else libnccl.so.2 on the loader's path, else
// /usr/local/cuda/lib64/libnccl.so.2.
std::string nccl_unavailable_reason();

// One communicator per device in devices[0 .. k).
NcclComms* nccl_comms_create(const int* devices, int k);
void nccl_comms_destroy(NcclComms* comms);

// In place: bufs[r] (n floats on devices[r]) = sum over r of bufs[r], queued on
// streams[r] (asynchronous, like a kernel launch).
void nccl_allreduce_sum(NcclComms* comms, float* const* bufs, int64_t n, const cudaStream_t* streams);

}  // namespace attnsweep
