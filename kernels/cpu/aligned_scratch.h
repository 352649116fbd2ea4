// A 64-byte aligned float buffer that only grows: per-thread scratch of the CPU kernels
// (gemm.cpp's packed panels, attention.cpp's packed path), kept thread_local so the step
// loop allocates nothing once warm.
#pragma once

#include <cstddef>
#include <new>

namespace attnsweep {

struct AlignedScratch {
  float* p = nullptr;
  size_t n = 0;
  float* get(size_t want) {
    if (want > n) {
      ::operator delete[](p, std::align_val_t(64));
      p = static_cast<float*>(::operator new[](want * sizeof(float), std::align_val_t(64)));
      n = want;
    }
    return p;
  }
  AlignedScratch() = default;
  AlignedScratch(const AlignedScratch&) = delete;
  AlignedScratch& operator=(const AlignedScratch&) = delete;
  ~AlignedScratch() { ::operator delete[](p, std::align_val_t(64)); }
};

}  // namespace attnsweep
