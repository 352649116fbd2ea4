#include "experiments/burgers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace attnsweep {

using cplx = std::complex<double>;

namespace {

bool is_power_of_two(int64_t n) {
  return n > 0 && (n & (n - 1)) == 0;
}

// A radix-2 plan: bit-reversal table and twiddles exp(-2 pi i j / n), each computed
// directly (not by repeated multiplication, which loses digits as n grows).
class Fft {
 public:
  explicit Fft(int64_t n) : n_(n), w_(static_cast<size_t>(n / 2)), rev_(static_cast<size_t>(n)) {
    if (!is_power_of_two(n)) throw std::runtime_error("fft: " + std::to_string(n) + " is not a power of two");
    for (int64_t j = 0; j < n / 2; ++j)
      w_[static_cast<size_t>(j)] = std::polar(1.0, -2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n));
    int bits = 0;
    while ((int64_t{1} << bits) < n) ++bits;
    for (int64_t i = 0; i < n; ++i) {
      int64_t r = 0;
      for (int b = 0; b < bits; ++b)
        if (i & (int64_t{1} << b)) r |= int64_t{1} << (bits - 1 - b);
      rev_[static_cast<size_t>(i)] = r;
    }
  }
  void run(cplx* a, bool inverse) const {
    for (int64_t i = 0; i < n_; ++i)
      if (const int64_t r = rev_[static_cast<size_t>(i)]; i < r) std::swap(a[i], a[r]);
    for (int64_t len = 2; len <= n_; len <<= 1) {
      const int64_t half = len / 2, stride = n_ / len;
      for (int64_t i = 0; i < n_; i += len)
        for (int64_t j = 0; j < half; ++j) {
          // Written out in reals: std::complex's operator* checks for NaN/inf on every call.
          const cplx w = w_[static_cast<size_t>(j * stride)];
          const double wr = w.real(), wi = inverse ? -w.imag() : w.imag();
          const cplx x = a[i + j + half];
          const cplx v(x.real() * wr - x.imag() * wi, x.real() * wi + x.imag() * wr);
          const cplx u = a[i + j];
          a[i + j] = u + v;
          a[i + j + half] = u - v;
        }
    }
  }

 private:
  int64_t n_;
  std::vector<cplx> w_;
  std::vector<int64_t> rev_;
};

// Signed wavenumber of FFT index j on M points.
int64_t wavenumber(int64_t j, int64_t M) {
  return j < M / 2 ? j : j - M;
}
// The 2/3 rule: modes with 3|k| >= M stay zero.
bool kept(int64_t k, int64_t M) {
  return 3 * std::abs(k) < M;
}

}  // namespace

void fft_radix2(cplx* a, int64_t n, bool inverse) {
  Fft(n).run(a, inverse);
}

BurgersSolution burgers_solve(const std::vector<double>& u0, double nu, double final_time, int64_t steps) {
  const int64_t M = static_cast<int64_t>(u0.size());
  if (!is_power_of_two(M) || M < 8)
    throw std::runtime_error("burgers: grid " + std::to_string(M) + " is not a power of two >= 8");
  if (!(nu >= 0) || !(final_time >= 0)) throw std::runtime_error("burgers: nu and final_time must be >= 0");
  const Fft fft(M);
  const size_t uM = static_cast<size_t>(M);
  const double inv_M = 1.0 / static_cast<double>(M);
  std::vector<cplx> v(uM);
  double umax = 0;
  for (size_t j = 0; j < uM; ++j) {
    v[j] = u0[j];
    umax = std::max(umax, std::abs(u0[j]));
  }
  fft.run(v.data(), false);
  int64_t kmax = 0;
  for (int64_t j = 0; j < M; ++j) {
    const int64_t k = wavenumber(j, M);
    if (!kept(k, M))
      v[static_cast<size_t>(j)] = 0;
    else
      kmax = std::max(kmax, std::abs(k));
  }
  // Explicit stability of the advection term (eigenvalues ~ i k u): |k_max u_max dt| <= 0.5.
  if (steps <= 0) {
    const double dt = std::min(0.01, 0.5 / (static_cast<double>(kmax) * std::max(umax, 1e-12)));
    steps = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(final_time / dt)));
  }
  const double h = final_time / static_cast<double>(steps);

  // ETDRK4 coefficients per mode (L = -nu k^2 is real, so each is real): the phi
  // functions as the mean over 32 points of the upper half of a unit circle around h L
  // (Kassam & Trefethen 2005, section 5), which avoids the cancellation near h L = 0.
  std::vector<double> E(uM), E2(uM), Q(uM), f1(uM), f2(uM), f3(uM);
  std::vector<double> g(uM);  // N(v) = -(i k / 2) FFT(u^2): g = -k / 2 times i
  constexpr int kContour = 32;
  for (int64_t j = 0; j < M; ++j) {
    const size_t s = static_cast<size_t>(j);
    const int64_t k = wavenumber(j, M);
    const double hL = -h * nu * static_cast<double>(k) * static_cast<double>(k);
    E[s] = std::exp(hL);
    E2[s] = std::exp(hL / 2);
    double q = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int m = 1; m <= kContour; ++m) {
      const cplx z = hL + std::polar(1.0, M_PI * (m - 0.5) / kContour);
      const cplx ez = std::exp(z), z3 = z * z * z;
      q += std::real((std::exp(z / 2.0) - 1.0) / z);
      a1 += std::real((-4.0 - z + ez * (4.0 - 3.0 * z + z * z)) / z3);
      a2 += std::real((2.0 + z + ez * (z - 2.0)) / z3);
      a3 += std::real((-4.0 - 3.0 * z - z * z + ez * (4.0 - z)) / z3);
    }
    Q[s] = h * q / kContour;
    f1[s] = h * a1 / kContour;
    f2[s] = h * a2 / kContour;
    f3[s] = h * a3 / kContour;
    g[s] = kept(k, M) ? -0.5 * static_cast<double>(k) : 0.0;
  }

  std::vector<cplx> work(uM);
  // out = g * FFT(u^2), u = IFFT(in) / M taken real (in is Hermitian up to rounding).
  auto nonlinear = [&](const std::vector<cplx>& in, std::vector<cplx>& out) {
    work = in;
    fft.run(work.data(), true);
    for (auto& w : work) {
      const double u = w.real() * inv_M;
      w = u * u;
    }
    fft.run(work.data(), false);
    for (size_t j = 0; j < uM; ++j) out[j] = cplx(-g[j] * work[j].imag(), g[j] * work[j].real());  // i g work
  };
  std::vector<cplx> Nv(uM), a(uM), Na(uM), b(uM), Nb(uM), c(uM), Nc(uM);
  for (int64_t step = 0; step < steps; ++step) {
    nonlinear(v, Nv);
    for (size_t j = 0; j < uM; ++j) a[j] = E2[j] * v[j] + Q[j] * Nv[j];
    nonlinear(a, Na);
    for (size_t j = 0; j < uM; ++j) b[j] = E2[j] * v[j] + Q[j] * Na[j];
    nonlinear(b, Nb);
    for (size_t j = 0; j < uM; ++j) c[j] = E2[j] * a[j] + Q[j] * (2.0 * Nb[j] - Nv[j]);
    nonlinear(c, Nc);
    for (size_t j = 0; j < uM; ++j) v[j] = E[j] * v[j] + f1[j] * Nv[j] + 2.0 * f2[j] * (Na[j] + Nb[j]) + f3[j] * Nc[j];
  }

  BurgersSolution sol;
  sol.grid = M;
  sol.steps = steps;
  sol.modes = v;
  work = v;
  fft.run(work.data(), true);
  sol.values.resize(uM);
  for (size_t j = 0; j < uM; ++j) sol.values[j] = work[j].real() * inv_M;
  double peak = 0, tail = 0;
  for (int64_t j = 0; j < M; ++j) {
    const double m = std::abs(v[static_cast<size_t>(j)]);
    peak = std::max(peak, m);
    if (3 * std::abs(wavenumber(j, M)) > 2 * kmax) tail = std::max(tail, m);
  }
  sol.tail = peak > 0 ? tail / peak : 0.0;
  return sol;
}

double FourierSeries::operator()(double x) const {
  double u = mean;
  for (size_t k = 1; k <= a.size(); ++k) u += a[k - 1] * std::cos(static_cast<double>(k) * x);
  for (size_t k = 1; k <= b.size(); ++k) u += b[k - 1] * std::sin(static_cast<double>(k) * x);
  return u;
}

BurgersSolution burgers_solve_resolved(const FourierSeries& u0, double nu, double final_time, int64_t max_grid) {
  constexpr double kTail = 1e-10;
  const int64_t K = static_cast<int64_t>(std::max(u0.a.size(), u0.b.size()));
  int64_t M = 256;
  while (3 * K >= M) M *= 2;  // the initial condition itself must survive the 2/3 rule
  BurgersSolution sol;
  for (; M <= max_grid; M *= 2) {
    std::vector<double> grid(static_cast<size_t>(M));
    for (int64_t j = 0; j < M; ++j)
      grid[static_cast<size_t>(j)] = u0(2.0 * M_PI * static_cast<double>(j) / static_cast<double>(M));
    sol = burgers_solve(grid, nu, final_time);
    if (sol.tail < kTail) return sol;
  }
  throw std::runtime_error("burgers: the solution is not resolved on " + std::to_string(max_grid) +
                           " grid points (spectral tail " + std::to_string(sol.tail) +
                           " of the peak, want < 1e-10): raise nu or shorten final_time");
}

std::vector<double> sample_periodic(const std::vector<cplx>& modes, int64_t n) {
  const int64_t M = static_cast<int64_t>(modes.size());
  if (n <= 0) throw std::runtime_error("sample_periodic: n must be positive");
  std::vector<double> out(static_cast<size_t>(n));
  const double inv_M = 1.0 / static_cast<double>(M);
  if (M % n == 0) {
    std::vector<cplx> w = modes;
    Fft(M).run(w.data(), true);
    for (int64_t j = 0; j < n; ++j) out[static_cast<size_t>(j)] = w[static_cast<size_t>(j * (M / n))].real() * inv_M;
    return out;
  }
  // u(x) = (v_0 + 2 sum_{k=1}^{M/2-1} Re(v_k e^{ikx})) / M for real u without a Nyquist
  // mode; e^{ik x_j} = root[(k j) mod n] exactly.
  int64_t top = 0;
  for (int64_t k = 1; k < M / 2; ++k)
    if (modes[static_cast<size_t>(k)] != cplx(0.0)) top = k;
  std::vector<cplx> root(static_cast<size_t>(n));
  for (int64_t m = 0; m < n; ++m)
    root[static_cast<size_t>(m)] = std::polar(1.0, 2.0 * M_PI * static_cast<double>(m) / static_cast<double>(n));
  for (int64_t j = 0; j < n; ++j) {
    double s = modes[0].real();
    for (int64_t k = 1; k <= top; ++k)
      s += 2.0 * std::real(modes[static_cast<size_t>(k)] * root[static_cast<size_t>((k * j) % n)]);
    out[static_cast<size_t>(j)] = s * inv_M;
  }
  return out;
}

}  // namespace attnsweep
