// pattern/terms/strided.hpp - the strided kind (TermKind::Strided, always
// causal; Sparse Transformer): a = stride l; p - j < l or (p - j) % l == 0.
// Its forms, as term_kinds.hpp lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct Strided {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return p - j < t.a || (p - j) % t.a == 0;
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    using namespace pattern_math;
    const int64_t l = t.a;
    const int64_t window = overlap(p - l + 1, p, j0, j1);
    const int64_t far = count_congruent(j0, min64(j1, p - l), l, p - floor_div(p, l) * l);
    return window + far;
  }

  // Pairs depend only on d = p - j; allowed d are [0, l-1] and the multiples
  // of l, and every d in [p0 - j1, p1 - j0] occurs in the rectangle.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool) {
    const int64_t l = t.a;
    const int64_t d_lo = r.p0 - r.j1, d_hi = r.p1 - r.j0;
    if (d_hi < 0) return BlockClass::Empty;
    if (l == 1) return d_lo >= 0 ? BlockClass::Full : BlockClass::Partial;
    if (d_lo >= 0 && d_hi <= l) return BlockClass::Full;
    if (d_lo == d_hi) return d_lo % l == 0 ? BlockClass::Full : BlockClass::Empty;
    if (d_lo <= l) return BlockClass::Partial;
    const int64_t first_multiple = ((d_lo + l - 1) / l) * l;
    return first_multiple <= d_hi ? BlockClass::Partial : BlockClass::Empty;
  }

  // The window, then one interval per period back to key 0 (or [0, p1] when
  // the rows span a whole period).
  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    const int64_t l = t.a;
    if (l <= p1 - p0 + 1) {
      out.push_back({0, p1});
      return;
    }
    out.push_back({p0 - l + 1, p1});
    for (int64_t back = l; p1 - back >= 0; back += l) out.push_back({p0 - back, p1 - back});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    return lanes.at_most(j + t.a - 1) | lanes.stepped(j + t.a, lanes.last(), t.a, j);
  }
};

}  // namespace spattn::terms
