// Which devices this process can use. Without the CUDA backend, or without a GPU,
// cuda_device_count() is 0.
#pragma once

namespace attnsweep {

int cuda_device_count();
bool cuda_backend_built();

}  // namespace attnsweep
