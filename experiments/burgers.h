// The 1D viscous Burgers equation u_t + u u_x = nu u_xx on the periodic interval
// [0, 2 pi), solved pseudo-spectrally: Fourier-Galerkin in space with the 2/3 rule
// (modes |k| >= M/3 of an M-point grid are kept at zero, so the quadratic term is
// computed without aliasing), ETDRK4 in time (Cox & Matthews 2002, with the
// coefficients of Kassam & Trefethen 2005 by a contour integral): the stiff diffusion
// -nu k^2 is integrated exactly, the nonlinear term -(u^2/2)_x by a fourth-order rule.
// The mean of u (mode 0) is exactly conserved by construction.
//
// The pde task (experiments/pde.cpp) solves every sample on a fine grid chosen by
// burgers_solve_resolved() and samples the same trigonometric polynomial at the N points
// a cell asks for, so cells with different N learn the same functions.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace attnsweep {

// In-place radix-2 FFT of n = 2^m points: a_k = sum_j a_j exp(-+ 2 pi i jk/n) (inverse:
// +, unnormalised).
void fft_radix2(std::complex<double>* a, int64_t n, bool inverse);

struct BurgersSolution {
  int64_t grid = 0;                         // M, a power of two
  int64_t steps = 0;                        // ETDRK4 steps taken
  std::vector<std::complex<double>> modes;  // u(T)'s M Fourier coefficients (FFT of the grid values)
  std::vector<double> values;               // u(T) at x_j = 2 pi j / M
  double tail = 0;  // max |u_k| over the top third of the retained modes / max |u_k|: < 1e-10 when resolved
};

// u(., T) from u0 given at the M grid points x_j = 2 pi j / M (M a power of two >= 8).
// steps = 0: dt chosen from an explicit stability bound, dt <= 0.5 / (k_max max|u0|)
// (max|u| never grows for Burgers) and dt <= 0.01.
BurgersSolution burgers_solve(const std::vector<double>& u0, double nu, double final_time, int64_t steps = 0);

// Solves a band-limited initial condition (its cosine and sine coefficients a_k, b_k,
// k = 1..K, plus a mean) on grids 256, 512, ... until the spectrum's tail is below
// 1e-10 of its peak; throws when even `max_grid` points do not resolve it.
struct FourierSeries {
  double mean = 0;
  std::vector<double> a, b;  // u(x) = mean + sum_k a[k-1] cos kx + b[k-1] sin kx
  double operator()(double x) const;
};
BurgersSolution burgers_solve_resolved(const FourierSeries& u0, double nu, double final_time, int64_t max_grid = 8192);

// Values at x_j = 2 pi j / n (j < n) of the trigonometric polynomial with the given M
// Fourier coefficients (the interpolant of the grid values; modes |k| >= M/2 must be 0,
// as after the 2/3 rule): exact sampling when n divides M, exact interpolation otherwise.
std::vector<double> sample_periodic(const std::vector<std::complex<double>>& modes, int64_t n);

}  // namespace attnsweep
