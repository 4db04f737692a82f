// partial_bits.hpp - which (query row, key) pairs of a partial chunk are allowed.
//
// For a query tile (up to 64 consecutive rows of one head) and a run of keys,
// produces one 64-bit lane mask per key: bit i set when row row0 + i may attend
// to the key under the pattern expression (exactly expr_allows of
// pattern_terms.hpp). Each term maps a key to the query positions that may see
// it, which is an interval or a stride pattern for every term kind, so a mask
// costs a few integer operations per key and term instead of one predicate
// call per pair.
#pragma once

#include <cstdint>

#include "spattn/pattern_terms.hpp"

namespace spattn::cpu_fast {

struct TileMaskContext {
  const PatternExpr* expr = nullptr;
  int64_t head = 0;   // query head, as passed to expr_allows
  int64_t row0 = 0;   // first query row of the tile
  int64_t rows = 0;   // rows in the tile, 1..64
  int64_t shift = 0;  // Lk - Lq: row i sits at position i + shift
};

// AllowedBitsFn over a TileMaskContext.
void tile_allowed_bits(const void* context, int64_t first, int64_t count, uint64_t* bits);

}  // namespace spattn::cpu_fast
