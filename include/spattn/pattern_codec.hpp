// spattn/pattern_codec.hpp - a Pattern as flat integer arrays, and back.
//
// Bindings (the PyTorch operators) pass patterns across their boundary as
// plain integers: one int64 `code` array holding every expression and term,
// and two tables holding what the terms point to. The layout is versioned:
//
//   code[0]  kPatternCodeVersion
//   code[1]  E, the number of expressions (1: shared by all heads; else one per head)
//   code[2..6]  the frame (Pattern::framed): framed (0 or 1), first_row,
//            first_key, q_len, k_len (all 0 when not framed)
//   then E expressions, each   op (0 = or, 1 = and), T (1 .. kMaxTerms),
//                              then T terms of kTermWords words each:
//     kind, causal, a, b, c, table_rows, table_width, table_heads, num_tokens,
//     indices_at, offsets_at, tokens_at
//
// `*_at` are element offsets of the term's arrays in the tables, -1 when the
// term has none: `indices` in table_i32 (BigBird: table_rows * table_width
// random blocks; custom: the CSR columns), `offsets` (custom CSR row offsets,
// table_heads * table_rows + 1 of them) and `tokens` (Longformer's num_tokens
// global positions) in table_i64. Terms sharing an array share its entries.
//
// Decoding trusts nothing: sizes and offsets are range-checked, and every term
// is rebuilt through the Pattern builders, so invalid parameters raise the same
// spattn::Error (naming the parameter) as building the pattern directly.
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/pattern.hpp"

namespace spattn {

constexpr int64_t kPatternCodeVersion = 2;
constexpr int64_t kTermWords = 12;

struct EncodedPattern {
  std::vector<int64_t> code;
  std::vector<int32_t> table_i32;
  std::vector<int64_t> table_i64;
};

EncodedPattern encode_pattern(const Pattern& pattern);

// Rebuilds the pattern from arrays laid out as above. Throws spattn::Error
// naming the offending word or parameter.
Pattern decode_pattern(const int64_t* code, int64_t code_size, const int32_t* table_i32,
                       int64_t table_i32_size, const int64_t* table_i64, int64_t table_i64_size);

inline Pattern decode_pattern(const EncodedPattern& e) {
  return decode_pattern(e.code.data(), static_cast<int64_t>(e.code.size()), e.table_i32.data(),
                        static_cast<int64_t>(e.table_i32.size()), e.table_i64.data(),
                        static_cast<int64_t>(e.table_i64.size()));
}

}  // namespace spattn
