// Which devices this process can use. Without the CUDA backend, or without a GPU,
// cuda_device_count() is 0.
#pragma once

#include <cstdint>
#include <string>

namespace attnsweep {

int cuda_device_count();
bool cuda_backend_built();
// Name and UUID ("GPU-xxxxxxxx-...", as nvidia-smi prints it) of device `dev`; "" without one.
std::string cuda_device_name(int dev);
std::string cuda_device_uuid(int dev);
// Total memory of device `dev` in bytes (cudaGetDeviceProperties' totalGlobalMem: what
// the device has, not what is free now); 0 without the CUDA backend or that device.
int64_t cuda_device_memory_bytes(int dev);

// The device name of `train --device` and of a TaskContext: "cpu" -> -1, "cuda" -> 0,
// "cuda:N" -> N. Anything else throws std::invalid_argument naming what was expected.
int cuda_device_index(const std::string& device);

}  // namespace attnsweep
