// A small counter-based generator (splitmix64) with Box-Muller normals: the same
// numbers on every machine and compiler, unlike std::normal_distribution.
#pragma once

#include <cmath>
#include <cstdint>

namespace attnsweep {

inline uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Mixes several integers into one stream seed.
inline uint64_t seed_of(std::initializer_list<uint64_t> parts) {
  uint64_t s = 0x243F6A8885A308D3ull;
  for (uint64_t p : parts) {
    s ^= p + 0x9E3779B97F4A7C15ull + (s << 6) + (s >> 2);
    uint64_t t = s;
    s = splitmix64(t);
  }
  return s;
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  // Uniform in (0, 1): 53 random bits, never exactly 0.
  double uniform() { return (static_cast<double>(splitmix64(state_) >> 11) + 0.5) * 0x1.0p-53; }
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = uniform(), u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace attnsweep
