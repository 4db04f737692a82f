// pattern/terms/term_math.hpp - the integer arithmetic the pattern kinds
// (pattern/terms/*.hpp) are written in: floor division and modulo of either
// sign, interval overlaps, counts of residues in an interval, binary search,
// and the division shortcuts the GPU row words use. Host and device.
//
// Installed with the public headers (spattn/pattern_terms.hpp includes the
// kinds); namespace spattn::pattern_math.
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"

namespace spattn::pattern_math {

SPATTN_HD int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
SPATTN_HD int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }
SPATTN_HD int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

// ceil(x / m) for x >= 0 and m > 0, without the overflow of (x + m - 1) / m.
SPATTN_HD int64_t ceil_div(int64_t x, int64_t m) { return x / m + (x % m != 0 ? 1 : 0); }

// floor(x / m) for m > 0 and any sign of x.
SPATTN_HD int64_t floor_div(int64_t x, int64_t m) {
  const int64_t q = x / m;
  return (x % m != 0 && x < 0) ? q - 1 : q;
}

// Size of [lo, hi] intersected with [j0, j1] (inclusive bounds).
SPATTN_HD int64_t overlap(int64_t lo, int64_t hi, int64_t j0, int64_t j1) {
  const int64_t n = min64(hi, j1) - max64(lo, j0) + 1;
  return n > 0 ? n : 0;
}

// Size of the inclusive interval [lo, hi] (0 when empty).
SPATTN_HD int64_t interval_size(int64_t lo, int64_t hi) { return hi >= lo ? hi - lo + 1 : 0; }

// Number of j in [lo, hi] with j mod m == r (0 <= r < m).
SPATTN_HD int64_t count_congruent(int64_t lo, int64_t hi, int64_t m, int64_t r) {
  if (hi < lo) return 0;
  return floor_div(hi - r, m) - floor_div(lo - 1 - r, m);
}

// Number of j in [0, n) with j mod m >= t (0 <= t <= m).
SPATTN_HD int64_t count_residue_at_least_prefix(int64_t n, int64_t m, int64_t t) {
  if (n <= 0) return 0;
  return (n / m) * (m - t) + max64(0, n % m - t);
}

// Number of j in [lo, hi] with j mod m >= t, lo >= 0.
SPATTN_HD int64_t count_residue_at_least(int64_t lo, int64_t hi, int64_t m, int64_t t) {
  if (hi < lo) return 0;
  return count_residue_at_least_prefix(hi + 1, m, t) - count_residue_at_least_prefix(lo, m, t);
}

// Index of the first element >= x in sorted a[0, n).
template <typename T>
SPATTN_HD int64_t lower_bound(const T* a, int64_t n, int64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(a[mid]) < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

SPATTN_HD bool fits_int32(int64_t x) { return x >= -2147483647 && x <= 2147483647; }

SPATTN_HD bool is_power_of_two(int64_t m) { return (m & (m - 1)) == 0; }

// log2 of a power of two.
SPATTN_HD int log2_of_power_of_two(int64_t m) {
#if defined(__CUDA_ARCH__)
  return __ffsll(m) - 1;
#else
  return __builtin_ctzll(static_cast<unsigned long long>(m));
#endif
}

// x mod m in [0, m) for m > 0. Division is a long instruction sequence on the
// GPU (a subroutine in 64 bits), and partial tiles evaluate several per row:
// a mask when m is a power of two (two's complement gives the residue of a
// negative x too), else 32-bit arithmetic when both fit.
SPATTN_HD int64_t positive_mod(int64_t x, int64_t m) {
  if (is_power_of_two(m)) return x & (m - 1);
  if (fits_int32(x) && fits_int32(m)) {
    const int32_t r = static_cast<int32_t>(x) % static_cast<int32_t>(m);
    return r < 0 ? r + m : r;
  }
  const int64_t r = x % m;
  return r < 0 ? r + m : r;
}

// x / m for x >= 0 and m > 0, cheap in the same ways as positive_mod.
SPATTN_HD int64_t nonnegative_div(int64_t x, int64_t m) {
  if (is_power_of_two(m)) return x >> log2_of_power_of_two(m);
  if (fits_int32(x) && fits_int32(m)) return static_cast<int32_t>(x) / static_cast<int32_t>(m);
  return x / m;
}

}  // namespace spattn::pattern_math
