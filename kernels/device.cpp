#include "kernels/device.h"

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

bool cuda_backend_built() {
#ifdef ATTNSWEEP_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace attnsweep
