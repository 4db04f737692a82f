// bigbird_random.cpp - the seeded generator of BigBird's random blocks.
//
// For row b of n blocks (window half-width h = (w-1)/2, g global blocks), the
// candidates are the key blocks not already kept by another rule: outside the
// global columns [0, g) and [n-g, n), outside the window [b-h, b+h], and, when
// causal, at most b. They form at most two intervals. Global rows keep every
// block and draw nothing. A splitmix64 stream seeded with `seed` runs over the
// rows in order; each of the row's r slots draws `next() % count` (the index
// into the candidate intervals) until it finds a block not drawn yet for the
// row (a per-block stamp of the last row that drew it makes that test O(1)).
// Rows with at most r candidates take them all. Unused slots are -1. The
// n x r table is checked against the memory available before it is made.
// Every backend reads this one table, so every backend sees the same mask.
#include <algorithm>
#include <string>

#include "spattn/memory.hpp"
#include "spattn/pattern.hpp"
#include "spattn/splitmix64.hpp"

namespace spattn {

std::vector<int32_t> bigbird_random_blocks(int64_t n, int64_t window_blocks, int64_t global_blocks,
                                           int64_t random_blocks, uint64_t seed, bool causal) {
  MemoryEstimate("bigbird with " + std::to_string(n) + " key blocks (seq_len_k / block) and random_blocks=" +
                 std::to_string(random_blocks))
      .add("random-block table", bytes_for(bytes_for(n, random_blocks), sizeof(int32_t)))
      .add("draw stamps", bytes_for(n, sizeof(int64_t)))
      .check();
  std::vector<int32_t> table(static_cast<size_t>(n * random_blocks), -1);
  std::vector<int64_t> drawn_by(static_cast<size_t>(n), -1);  // the last row that drew each block
  SplitMix64 rng(seed);
  const int64_t half = (window_blocks - 1) / 2, g = global_blocks;
  for (int64_t b = 0; b < n; ++b) {
    if (b < g || b >= n - g) continue;
    const int64_t last = std::min(n - g - 1, causal ? b : n - 1);
    const int64_t lo1 = g, hi1 = std::min(b - half - 1, last);
    const int64_t lo2 = std::max(b + half + 1, g), hi2 = last;
    const int64_t len1 = std::max<int64_t>(0, hi1 - lo1 + 1);
    const int64_t len2 = std::max<int64_t>(0, hi2 - lo2 + 1);
    const int64_t count = len1 + len2;
    int32_t* row = table.data() + b * random_blocks;
    auto candidate = [&](int64_t k) { return static_cast<int32_t>(k < len1 ? lo1 + k : lo2 + k - len1); };
    if (count <= random_blocks) {
      for (int64_t k = 0; k < count; ++k) row[k] = candidate(k);
      continue;
    }
    for (int64_t slot = 0; slot < random_blocks; ++slot) {
      int32_t c;
      do {
        c = candidate(static_cast<int64_t>(rng.next() % static_cast<uint64_t>(count)));
      } while (drawn_by[static_cast<size_t>(c)] == b);
      drawn_by[static_cast<size_t>(c)] = b;
      row[slot] = c;
    }
  }
  return table;
}

}  // namespace spattn
