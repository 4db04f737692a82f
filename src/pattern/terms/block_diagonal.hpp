// pattern/terms/block_diagonal.hpp - the block-diagonal kind
// (TermKind::BlockDiagonal): a = block size B; floor(p/B) == floor(j/B). Its
// forms, as term_kinds.hpp lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct BlockDiagonal {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return pattern_math::floor_div(p, t.a) == pattern_math::floor_div(j, t.a);
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    const int64_t s = pattern_math::floor_div(p, t.a) * t.a;
    return pattern_math::overlap(s, s + t.a - 1, j0, j1);
  }

  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool causal) {
    return block_classify::segment(r, t.a, causal);
  }

  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    out.push_back({pattern_math::floor_div(p0, t.a) * t.a, pattern_math::floor_div(p1, t.a) * t.a + t.a - 1});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    const int64_t s = pattern_math::floor_div(j, t.a) * t.a;
    return lanes.interval(s, s + t.a - 1);
  }
};

}  // namespace spattn::terms
