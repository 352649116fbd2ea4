// The pde task: learn the solution operator u(., 0) -> u(., T) of the 1D viscous Burgers
// equation u_t + u u_x = nu u_xx on the periodic grid x_j = 2 pi j / N, j < N (N = the
// prompt length), one token per grid point with features (u0(x_j), sin x_j, cos x_j),
// one target u(x_j, T) per token; metric test_rel_l2 = mean over the test split of
// ||pred - u_T|| / ||u_T|| on the N points.
//
// Initial conditions: a Gaussian random field with zero mean,
//   u0(x) = sum_{k=1}^{32} a_k cos kx + b_k sin kx,  a_k, b_k ~ N(0, s_k^2),
//   s_k = A * 25 / (k^2 + 25)
// (the spectrum of FNO's Burgers data, 625 (-Laplacian + 25)^-2, cut at k = 32), A set so
// that the expected root mean square of u0 is 1/2. Targets: burgers_solve_resolved()
// (experiments/burgers.h) from the Fourier series itself, sampled at the N points, so
// every N sees the same functions.
#pragma once

#include <cstdint>
#include <vector>

#include "experiments/burgers.h"

namespace attnsweep {

struct PdeSpec {
  int64_t grid = 64;  // N
  double nu = 0.1;
  double final_time = 1.0;
  uint64_t data_seed = 0;
};

// The initial condition of sample `index` of split 0 (train) or 1 (test).
FourierSeries pde_initial_condition(const PdeSpec& spec, int split, int64_t index);

struct PdeSample {
  std::vector<float> u0, uT;  // [N] each
  std::vector<float> heat;    // [N]: the linear heat equation's u(., T) (drops u u_x): a baseline
  int64_t solver_grid = 0;
};
PdeSample pde_sample(const PdeSpec& spec, int split, int64_t index);

}  // namespace attnsweep
