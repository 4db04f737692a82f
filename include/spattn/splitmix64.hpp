// spattn/splitmix64.hpp - the one pseudo-random stream of the project.
//
// splitmix64 (Steele, Lea, Flood 2014): 64-bit state, one addition and two
// multiply-xorshift rounds per draw. Portable and fully specified, so BigBird's
// random blocks, the CLI's random block masks and the structured test inputs
// are the same on every machine and every backend.
#pragma once

#include <cmath>
#include <cstdint>

namespace spattn {

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Standard normal by Box-Muller (one value per two uniforms).
  double normal() {
    constexpr double kTwoPi = 6.283185307179586476925;
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace spattn
