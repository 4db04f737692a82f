// pattern/terms/dilated.hpp - the dilated kind (TermKind::Dilated; LongNet):
// a = segment w, b = rate r; j in p's w-segment and p % r == j % r == h % r
// (it reads the head). Its forms, as term_kinds.hpp lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct Dilated {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t h, int64_t, int64_t p, int64_t j) {
    using pattern_math::floor_div;
    const int64_t r = t.b, hr = h % r;
    return floor_div(p, t.a) == floor_div(j, t.a) && p - floor_div(p, r) * r == hr && j % r == hr;
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t h, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    using namespace pattern_math;
    const int64_t w = t.a, r = t.b, hr = h % r;
    if (p - floor_div(p, r) * r != hr) return 0;
    const int64_t s = floor_div(p, w) * w;
    return count_congruent(max64(s, j0), min64(s + w - 1, j1), r, hr);
  }

  // The segment rule decides an empty rectangle or a rate of 1; a full
  // segment rectangle holds some allowed pair iff it has a row and a key of
  // the head's residue, all of them only when it is a single pair.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t h, const BlockRect& r, bool causal) {
    const int64_t rate = t.b, hr = h % rate;
    const BlockClass seg = block_classify::segment(r, t.a, causal);
    if (rate == 1 || seg == BlockClass::Empty) return seg;
    if (seg != BlockClass::Full) return BlockClass::Unknown;
    const bool row_active = pattern_math::count_congruent(r.p0, r.p1, rate, hr) > 0;
    const bool key_active = pattern_math::count_congruent(r.j0, r.j1, rate, hr) > 0;
    if (!row_active || !key_active) return BlockClass::Empty;
    return r.p0 == r.p1 && r.j0 == r.j1 ? BlockClass::Full : BlockClass::Partial;
  }

  // The rows' segments, where some row is of the head's residue.
  static void key_intervals(const PatternTerm& t, int64_t h, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    using pattern_math::floor_div;
    const int64_t w = t.a, r = t.b, hr = h % r;
    bool any_row = p1 - p0 + 1 >= r;
    for (int64_t p = p0; !any_row && p <= p1; ++p) any_row = p - floor_div(p, r) * r == hr;
    if (any_row) out.push_back({floor_div(p0, w) * w, floor_div(p1, w) * w + w - 1});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t h, const TileLanes& lanes, int64_t j) {
    const int64_t rate = t.b, residue = h % rate;
    if (j % rate != residue) return 0;
    const int64_t s = pattern_math::floor_div(j, t.a) * t.a;
    return lanes.stepped(s, s + t.a - 1, rate, residue);
  }
};

}  // namespace spattn::terms
