// pattern/terms/sliding_window.hpp - the sliding-window kind
// (TermKind::SlidingWindow): a = left, b = right; p - left <= j <= p + right.
// Its forms, as term_kinds.hpp lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct SlidingWindow {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return p - t.a <= j && j <= p + t.b;
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    return pattern_math::overlap(p - t.a, p + t.b, j0, j1);
  }

  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool causal) {
    return block_classify::shifted_interval(r, -t.a, t.b, causal);
  }

  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    out.push_back({p0 - t.a, p1 + t.b});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    return lanes.interval(j - t.b, j + t.a);
  }
};

}  // namespace spattn::terms
