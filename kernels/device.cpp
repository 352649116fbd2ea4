#include "kernels/device.h"

#include <cstdio>
#include <stdexcept>

#ifdef ATTNSWEEP_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace attnsweep {

int cuda_device_count() {
#ifdef ATTNSWEEP_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

std::string cuda_device_name(int dev) {
#ifdef ATTNSWEEP_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) return p.name;
  cudaGetLastError();
#endif
  (void)dev;
  return "";
}

std::string cuda_device_uuid(int dev) {
#ifdef ATTNSWEEP_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) {
    static const int groups[] = {4, 2, 2, 2, 6};
    std::string out = "GPU";
    int k = 0;
    char buf[3];
    for (int g : groups) {
      out += '-';
      for (int i = 0; i < g; ++i, ++k) {
        std::snprintf(buf, sizeof buf, "%02x", static_cast<unsigned char>(p.uuid.bytes[k]));
        out += buf;
      }
    }
    return out;
  }
  cudaGetLastError();
#endif
  (void)dev;
  return "";
}

int64_t cuda_device_memory_bytes(int dev) {
#ifdef ATTNSWEEP_HAVE_CUDA
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess) return static_cast<int64_t>(p.totalGlobalMem);
  cudaGetLastError();
#endif
  (void)dev;
  return 0;
}

int cuda_device_index(const std::string& device) {
  if (device == "cpu") return -1;
  if (device == "cuda") return 0;
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() <= 9 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos)
    return std::stoi(device.substr(5));
  throw std::invalid_argument("device: expected cpu, cuda or cuda:N, got \"" + device + "\"");
}

bool cuda_backend_built() {
#ifdef ATTNSWEEP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace attnsweep
