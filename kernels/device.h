// Which devices this process can use. Without the CUDA backend, or without a GPU,
// cuda_device_count() is 0.
#pragma once

#include <string>

namespace attnsweep {

int cuda_device_count();
bool cuda_backend_built();
// Name and UUID ("GPU-xxxxxxxx-...", as nvidia-smi prints it) of device `dev`; "" without one.
std::string cuda_device_name(int dev);
std::string cuda_device_uuid(int dev);

}  // namespace attnsweep
