// pattern/terms/fixed.hpp - the fixed kind (TermKind::Fixed, always causal;
// Sparse Transformer): a = stride l, b = summary c; j in p's l-segment, or
// j % l >= l - c (the summary columns). Its forms, as term_kinds.hpp lists
// them; it has no span form on the GPU (its keys are tested one by one).
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct Fixed {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return pattern_math::floor_div(j, t.a) == pattern_math::floor_div(p, t.a) || j % t.a >= t.a - t.b;
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    using namespace pattern_math;
    const int64_t l = t.a, first_summary = t.a - t.b;
    const int64_t seg_lo = max64(floor_div(p, l) * l, j0), seg_hi = min64(p, j1);
    const int64_t in_segment = seg_hi >= seg_lo ? seg_hi - seg_lo + 1 : 0;
    const int64_t summary = count_residue_at_least(j0, j1, l, first_summary);
    const int64_t summary_in_segment = in_segment ? count_residue_at_least(seg_lo, seg_hi, l, first_summary) : 0;
    return in_segment + summary - summary_in_segment;
  }

  // Keys that are all summary columns follow the causal rule; keys with no
  // summary column follow the causal segment rule; mixed keys: no closed form.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool) {
    const int64_t summary = pattern_math::count_residue_at_least(r.j0, r.j1, t.a, t.a - t.b);
    if (summary == 0) return block_classify::segment(r, t.a, true);
    if (summary == r.j1 - r.j0 + 1) return block_classify::causal_prefix(r);
    return BlockClass::Unknown;
  }

  // The rows' segment, then the summary columns: one interval per segment up
  // to p1 (or [0, p1] when they are all or most of the keys).
  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    const int64_t l = t.a, c = t.b;
    out.push_back({pattern_math::floor_div(p0, l) * l, p1});
    if (c == 0) return;
    if (c == l || l <= 2 * (p1 - p0 + 1)) {
      out.push_back({0, p1});
      return;
    }
    for (int64_t first = l - c; first <= p1; first += l) out.push_back({first, first + c - 1});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    const int64_t s = pattern_math::floor_div(j, t.a) * t.a;
    return lanes.interval(s, s + t.a - 1) | (j % t.a >= t.a - t.b ? lanes.all() : 0);
  }
};

}  // namespace spattn::terms
