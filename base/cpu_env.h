// Environment fixes for CPU training that must be in place before the process starts
// (libgomp and OpenBLAS read them while loading), so `attnsweep train` re-executes
// itself once with them set (app/main.cpp). Measured on the 2-core CI machine with the
// reference cell (image, N = 49, dim 64, 4 layers, batch 128):
// - OpenBLAS's DYNAMIC_ARCH probe names a virtualised Xeon ("Intel(R) Xeon(R)
//   Processor") Prescott and runs its SSE3 kernels: OPENBLAS_CORETYPE = SkylakeX
//   (AVX-512) or Haswell (AVX2), from what the CPU reports, makes the GEMMs ~2x faster.
// - libgomp spins at barriers by default (GOMP_SPINCOUNT 300,000); on shared
//   (oversubscribed) cores a spinning thread holds up the one that has work: 2 threads
//   ran 3x slower than 1. Passive waiting (a futex sleep at every barrier) costs ~100 us
//   a wake-up on this VM, ~150 of them a step: the reference cell ran 1397 samples/s
//   passive, 1680 with GOMP_SPINCOUNT = 10,000 (idle machine, median of 3). So: a bounded
//   spin, GOMP_SPINCOUNT = 10000 (a few hundred microseconds), and passive
//   (oversubscribed = true: more threads than cores in all, e.g. several worker slots
//   of 2 threads on 2 cores), where a spin only delays the thread that has work.
// A variable the user already set (OMP_WAIT_POLICY or GOMP_SPINCOUNT) is left alone.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnsweep {

std::vector<std::pair<std::string, std::string>> cpu_env_fixes(bool oversubscribed = false);

}  // namespace attnsweep
