// Environment fixes for CPU training that must be in place before the process starts
// (libgomp and OpenBLAS read them while loading), so `attnsweep train` re-executes
// itself once with them set (app/main.cpp). Measured on the 2-core CI machine with the
// reference cell (image, N = 49, dim 64, 4 layers, batch 128):
// - OpenBLAS's DYNAMIC_ARCH probe names a virtualised Xeon ("Intel(R) Xeon(R)
//   Processor") Prescott and runs its SSE3 kernels: OPENBLAS_CORETYPE = SkylakeX
//   (AVX-512) or Haswell (AVX2), from what the CPU reports, makes the GEMMs ~2x faster.
// - libgomp spins at barriers by default; on shared (oversubscribed) cores a spinning
//   thread holds up the one that has work: 2 threads ran 3x slower than 1.
//   OMP_WAIT_POLICY = passive.
// A variable the user already set is left alone.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnsweep {

std::vector<std::pair<std::string, std::string>> cpu_env_fixes();

}  // namespace attnsweep
