// pattern/terms/longformer.hpp - the Longformer kind (TermKind::Longformer):
// a = window W and a sorted set G of global token positions; |p - j| <= W/2,
// or j in G, or p in G. Its forms, as term_kinds.hpp lists them; it has no
// span form on the GPU (its keys are tested one by one).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn {

// Number of global tokens in [lo, hi].
SPATTN_HD int64_t longformer_global_count(const PatternTerm& t, int64_t lo, int64_t hi) {
  if (hi < lo) return 0;
  return pattern_math::lower_bound(t.tokens, t.num_tokens, hi + 1) -
         pattern_math::lower_bound(t.tokens, t.num_tokens, lo);
}

SPATTN_HD bool longformer_is_global(const PatternTerm& t, int64_t pos) {
  const int64_t at = pattern_math::lower_bound(t.tokens, t.num_tokens, pos);
  return at < t.num_tokens && t.tokens[at] == pos;
}

namespace terms {

struct Longformer {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return pattern_math::abs64(p - j) <= t.a / 2 || longformer_is_global(t, j) || longformer_is_global(t, p);
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    using namespace pattern_math;
    if (longformer_is_global(t, p)) return j1 - j0 + 1;
    const int64_t half = t.a / 2;
    const int64_t w_lo = max64(p - half, j0), w_hi = min64(p + half, j1);
    const int64_t in_window = w_hi >= w_lo ? w_hi - w_lo + 1 : 0;
    const int64_t g_all = lower_bound(t.tokens, t.num_tokens, j1 + 1) - lower_bound(t.tokens, t.num_tokens, j0);
    const int64_t g_window = in_window ? lower_bound(t.tokens, t.num_tokens, w_hi + 1) -
                                             lower_bound(t.tokens, t.num_tokens, w_lo)
                                       : 0;
    return in_window + g_all - g_window;
  }

  // Union of the window, the global keys (whole columns) and the global
  // queries (whole rows).
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool causal) {
    using namespace block_classify;
    const BlockClass window = shifted_interval(r, -(t.a / 2), t.a / 2, causal);
    const BlockClass keys =
        kept_columns(r, causal, r.j1 - r.j0 + 1, longformer_global_count(t, r.j0, r.j1),
                     causal ? longformer_global_count(t, r.j0, min64(r.j1, r.p1)) : 0);
    const BlockClass rows = kept_rows(r, causal, longformer_global_count(t, r.p0, r.p1),
                                      causal ? longformer_global_count(t, max64(r.p0, r.j0), r.p1) : 0);
    return union_of(window, union_of(keys, rows));
  }

  // Every key where a row is global; else the window and each global key.
  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t k_len,
                            std::vector<KeyInterval>& out) {
    const int64_t* begin = t.tokens;
    const int64_t* end = t.tokens + t.num_tokens;
    const int64_t* row_global = std::lower_bound(begin, end, p0);
    if (row_global != end && *row_global <= p1) {
      out.push_back({0, k_len - 1});
      return;
    }
    out.push_back({p0 - t.a / 2, p1 + t.a / 2});
    for (const int64_t* g = begin; g != end; ++g) out.push_back({*g, *g});
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    return longformer_is_global(t, j) ? lanes.all() : lanes.interval(j - t.a / 2, j + t.a / 2);
  }

  // The global queries of the tile, which see every key.
  static uint64_t lanes_allowing_every_key(const PatternTerm& t, const TileLanes& lanes) {
    uint64_t bits = 0;
    for (int64_t at = pattern_math::lower_bound(t.tokens, t.num_tokens, lanes.p0);
         at < t.num_tokens && t.tokens[at] <= lanes.last(); ++at)
      bits |= uint64_t{1} << (t.tokens[at] - lanes.p0);
    return bits;
  }
};

}  // namespace terms
}  // namespace spattn
