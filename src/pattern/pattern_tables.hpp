// pattern_tables.hpp - storage behind the table pointers of pattern terms.
//
// Terms are plain structs with raw pointers (so they work on the GPU); the
// vectors they point into live here, shared by every copy of a Pattern.
// bigbird_term assembles the one term kind whose table both the builder
// (pattern.cpp, which draws it) and the decoder (pattern_codec.cpp, which
// reads it) supply.
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn {

struct Pattern::Tables {
  std::vector<int32_t> indices;  // BigBird random blocks or custom CSR columns
  std::vector<int64_t> offsets;  // custom CSR row offsets
  std::vector<int64_t> tokens;   // Longformer global tokens
};

namespace detail {

// The BigBird term over `random`, a num_blocks x random_blocks table of key
// blocks (-1 = unused slot) kept alive by the Pattern's Tables; the caller has
// validated every argument.
inline PatternTerm bigbird_term(int64_t block, int64_t window_blocks, int64_t global_blocks,
                                int64_t num_blocks, int64_t random_blocks, bool causal,
                                const std::vector<int32_t>& random) {
  PatternTerm t;
  t.kind = TermKind::BigBird;
  t.causal = causal;
  t.a = block;
  t.b = window_blocks;
  t.c = global_blocks;
  t.indices = random.empty() ? nullptr : random.data();
  t.table_rows = num_blocks;
  t.table_width = random_blocks;
  return t;
}

}  // namespace detail

}  // namespace spattn
