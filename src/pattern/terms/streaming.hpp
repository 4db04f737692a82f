// pattern/terms/streaming.hpp - the streaming kind (TermKind::Streaming,
// always causal): a = sink S, b = window W; j < S or p - j < W. Its forms, as
// term_kinds.hpp lists them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct Streaming {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return j < t.a || p - j < t.b;
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    using pattern_math::overlap;
    return overlap(0, t.a - 1, j0, j1) + overlap(pattern_math::max64(t.a, p - t.b + 1), p, j0, j1);
  }

  // Keys below S follow the causal rule alone; keys from S on follow the window.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool) {
    using namespace block_classify;
    const int64_t S = t.a, W = t.b;
    const bool has_sink = r.j0 < S, has_window = r.j1 >= S;
    BlockRect sink_part = r, window_part = r;
    sink_part.j1 = min64(r.j1, S - 1);
    window_part.j0 = max64(r.j0, S);
    const BlockClass sink = has_sink ? causal_prefix(sink_part) : BlockClass::Empty;
    const BlockClass window =
        has_window ? monotone_interval(window_part, max64(S, r.p0 - W + 1), max64(S, r.p1 - W + 1), r.p0, r.p1)
                   : BlockClass::Empty;
    if (!has_sink) return window;
    if (!has_window) return sink;
    if (sink == BlockClass::Full && window == BlockClass::Full) return BlockClass::Full;
    if (sink == BlockClass::Empty && window == BlockClass::Empty) return BlockClass::Empty;
    return BlockClass::Partial;
  }

  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t,
                            std::vector<KeyInterval>& out) {
    out.push_back({0, t.a - 1});
    out.push_back({p0 - t.b + 1, p1});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    return j < t.a ? lanes.all() : lanes.at_most(j + t.b - 1);
  }
};

}  // namespace spattn::terms
