// pattern/terms/bigbird.hpp - the BigBird kind (TermKind::BigBird), a block
// pattern: a = block B, b = window blocks w, c = global blocks g, and a table
// of r random blocks per query block (drawn by bigbird_random_blocks). Query
// block qb sees key block kb iff |qb - kb| <= (w - 1) / 2, or kb or qb is
// among the first or last g blocks, or kb is one of qb's random blocks. Its
// forms, as term_kinds.hpp lists them; it has no span form on the GPU (its
// keys are tested one by one).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn {

// Does query block qb see key block kb? (window, global rows/columns, random.)
SPATTN_HD bool bigbird_blocks_connected(const PatternTerm& t, int64_t qb, int64_t kb) {
  const int64_t n = t.table_rows, half = (t.b - 1) / 2, g = t.c;
  if (pattern_math::abs64(qb - kb) <= half) return true;
  if (kb < g || kb >= n - g) return true;
  if (qb < 0 || qb >= n) return false;  // rows before position 0 (Lq > Lk) have no random blocks
  if (qb < g || qb >= n - g) return true;
  const int32_t* row = t.indices + qb * t.table_width;
  for (int64_t s = 0; s < t.table_width; ++s)
    if (row[s] == kb) return true;
  return false;
}

// How many key blocks of [kb0, kb1] (0 <= kb0 <= kb1 < n) does query block qb
// see? The same rule as bigbird_blocks_connected, counted in closed form: the
// union of the window and the two global column ranges, plus the row's random
// blocks outside that union (each counted once).
SPATTN_HD int64_t bigbird_connected_count(const PatternTerm& t, int64_t qb, int64_t kb0, int64_t kb1) {
  using pattern_math::max64;
  using pattern_math::min64;
  using pattern_math::interval_size;
  const int64_t n = t.table_rows, half = (t.b - 1) / 2, g = t.c;
  const bool row_in_table = qb >= 0 && qb < n;
  if (row_in_table && (qb < g || qb >= n - g)) return kb1 - kb0 + 1;
  // Window [qb - half, qb + half], left globals [0, g - 1], right globals
  // [n - g, n - 1], each clipped to [kb0, kb1] (compared so that a huge half
  // cannot overflow).
  const int64_t w_lo = qb - kb0 <= half ? kb0 : qb - half, w_hi = kb1 - qb <= half ? kb1 : qb + half;
  const int64_t l_hi = min64(g - 1, kb1), r_lo = max64(n - g, kb0);
  int64_t count = interval_size(w_lo, w_hi) + interval_size(kb0, l_hi) + interval_size(r_lo, kb1) -
                  interval_size(max64(w_lo, kb0), min64(w_hi, l_hi)) -
                  interval_size(max64(w_lo, r_lo), min64(w_hi, kb1)) - interval_size(r_lo, l_hi) +
                  interval_size(max64(w_lo, r_lo), min64(w_hi, l_hi));
  if (!row_in_table) return count;
  const int32_t* row = t.indices + qb * t.table_width;
  for (int64_t s = 0; s < t.table_width; ++s) {
    const int64_t c = row[s];
    if (c < kb0 || c > kb1 || pattern_math::abs64(qb - c) <= half || c < g || c >= n - g) continue;
    bool repeated = false;
    for (int64_t earlier = 0; earlier < s; ++earlier) repeated |= row[earlier] == c;
    count += repeated ? 0 : 1;
  }
  return count;
}

namespace terms {

struct BigBird {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t, int64_t, int64_t p, int64_t j) {
    return bigbird_blocks_connected(t, pattern_math::floor_div(p, t.a), j / t.a);
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t, int64_t, int64_t p,
                                     const int64_t& j0, const int64_t& j1) {
    const int64_t B = t.a, qb = pattern_math::floor_div(p, B);
    int64_t n = 0;
    for (int64_t kb = j0 / B; kb <= j1 / B; ++kb)
      if (bigbird_blocks_connected(t, qb, kb)) n += pattern_math::overlap(kb * B, kb * B + B - 1, j0, j1);
    return n;
  }

  // Rows inside one query block of BigBird's grid; keys in any number of its columns.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t, const BlockRect& r, bool causal) {
    using pattern_math::floor_div;
    const int64_t B = t.a, qb = floor_div(r.p0, B);
    if (floor_div(r.p1, B) != qb) return BlockClass::Unknown;
    const int64_t kb0 = r.j0 / B, kb1 = r.j1 / B, last_causal = pattern_math::min64(r.j1, r.p1);
    const int64_t kept_causal =
        causal && last_causal >= r.j0 ? bigbird_connected_count(t, qb, kb0, last_causal / B) : 0;
    return block_classify::kept_columns(r, causal, kb1 - kb0 + 1, bigbird_connected_count(t, qb, kb0, kb1),
                                        kept_causal);
  }

  // Every key where a row is in a global block; else the window and global
  // columns and the rows' random blocks.
  static void key_intervals(const PatternTerm& t, int64_t, int64_t, int64_t, int64_t p0, int64_t p1, int64_t k_len,
                            std::vector<KeyInterval>& out) {
    const int64_t B = t.a, n = t.table_rows, half = (t.b - 1) / 2, g = t.c;
    const int64_t b0 = pattern_math::floor_div(p0, B), b1 = pattern_math::floor_div(p1, B);
    const int64_t first_row = std::max<int64_t>(b0, 0), last_row = std::min(b1, n - 1);
    if (first_row <= last_row && (first_row < g || last_row >= n - g)) {
      out.push_back({0, k_len - 1});
      return;
    }
    // Window and global columns in block units, clamped to [0, n] before
    // scaling by B so that huge window or global counts cannot overflow.
    out.push_back({std::max<int64_t>(b0 - half, 0) * B, std::min(b1 + half + 1, n) * B - 1});
    if (g > 0) {
      out.push_back({0, std::min(g, n) * B - 1});
      out.push_back({std::max<int64_t>(n - g, 0) * B, k_len - 1});
    }
    for (int64_t b = first_row; b <= last_row; ++b)
      for (int64_t s = 0; s < t.table_width; ++s) {
        const int64_t c = t.indices[b * t.table_width + s];
        if (c >= 0) out.push_back({c * B, c * B + B - 1});
      }
  }

  static uint64_t lane_bits(const PatternTerm& t, int64_t, const TileLanes& lanes, int64_t j) {
    const int64_t kb = j / t.a;
    const int64_t qb_last = pattern_math::floor_div(lanes.last(), t.a);
    uint64_t bits = 0;
    for (int64_t qb = pattern_math::floor_div(lanes.p0, t.a); qb <= qb_last; ++qb)
      if (bigbird_blocks_connected(t, qb, kb)) bits |= lanes.interval(qb * t.a, qb * t.a + t.a - 1);
    return bits;
  }
};

}  // namespace terms
}  // namespace spattn
