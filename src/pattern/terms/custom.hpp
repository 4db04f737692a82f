// pattern/terms/custom.hpp - the custom kind (TermKind::Custom): a block mask
// on the (i, j) grid, blocks of a = block_q rows by b = block_k keys, kept
// blocks as CSR per (mask head, block row); every pair of a kept block. Its
// forms, as term_kinds.hpp lists them; on the GPU its row is a word of the
// kept blocks' keys (row_word), not spans.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn {

// Is there a custom block (row, col) for mask head h?
SPATTN_HD bool custom_block_kept(const PatternTerm& t, int64_t h, int64_t row, int64_t col) {
  const int64_t head = t.table_heads == 1 ? 0 : h;
  const int64_t r = head * t.table_rows + row;
  const int64_t begin = t.offsets[r], end = t.offsets[r + 1];
  const int64_t at = begin + pattern_math::lower_bound(t.indices + begin, end - begin, col);
  return at < end && t.indices[at] == col;
}

// How many custom blocks of columns [c0, c1] does row `row` of mask head h keep?
SPATTN_HD int64_t custom_kept_count(const PatternTerm& t, int64_t h, int64_t row, int64_t c0, int64_t c1) {
  const int64_t head = t.table_heads == 1 ? 0 : h;
  const int64_t r = head * t.table_rows + row;
  const int32_t* begin = t.indices + t.offsets[r];
  const int64_t n = t.offsets[r + 1] - t.offsets[r];
  return pattern_math::lower_bound(begin, n, c1 + 1) - pattern_math::lower_bound(begin, n, c0);
}

namespace terms {

struct Custom {
  SPATTN_HD static bool allows(const PatternTerm& t, int64_t h, int64_t i, int64_t, int64_t j) {
    return custom_block_kept(t, h, i / t.a, j / t.b);
  }

  SPATTN_HD static int64_t count_row(const PatternTerm& t, int64_t h, int64_t i, int64_t,
                                     const int64_t& j0, const int64_t& j1) {
    const int64_t head = t.table_heads == 1 ? 0 : h;
    const int64_t r = head * t.table_rows + i / t.a;
    const int64_t begin = t.offsets[r], end = t.offsets[r + 1];
    int64_t n = 0;
    for (int64_t at = begin + pattern_math::lower_bound(t.indices + begin, end - begin, j0 / t.b); at < end; ++at) {
      const int64_t kb = t.indices[at];
      if (kb * t.b > j1) break;
      n += pattern_math::overlap(kb * t.b, kb * t.b + t.b - 1, j0, j1);
    }
    return n;
  }

  // Rows inside one row of the custom grid (on i); keys in any number of its columns.
  SPATTN_HD static BlockClass classify_block(const PatternTerm& t, int64_t h, const BlockRect& r, bool causal) {
    const int64_t row = r.i0 / t.a;
    if (r.i1 / t.a != row) return BlockClass::Unknown;
    const int64_t c0 = r.j0 / t.b, c1 = r.j1 / t.b, last_causal = pattern_math::min64(r.j1, r.p1);
    const int64_t kept_causal =
        causal && last_causal >= r.j0 ? custom_kept_count(t, h, row, c0, last_causal / t.b) : 0;
    return block_classify::kept_columns(r, causal, c1 - c0 + 1, custom_kept_count(t, h, row, c0, c1), kept_causal);
  }

  // The keys among the 64 from k0 that the kept blocks of query row i keep
  // for mask head h (a walk over the row's sorted block columns; at most
  // 64 / block_k + 2 of them).
  SPATTN_HD static uint64_t row_word(const PatternTerm& t, int64_t h, int64_t i, int64_t k0) {
    const int64_t r = (t.table_heads == 1 ? 0 : h) * t.table_rows + i / t.a;
    const int32_t* columns = t.indices + t.offsets[r];
    const int64_t n = t.offsets[r + 1] - t.offsets[r], last = (k0 + 63) / t.b;
    uint64_t word = 0;
    for (int64_t at = pattern_math::lower_bound(columns, n, k0 / t.b); at < n && columns[at] <= last; ++at)
      word |= pattern_math::span_word(columns[at] * t.b, columns[at] * t.b + t.b - 1, 1, 0, k0);
    return word;
  }

  // The kept blocks of the rows' block rows.
  static void key_intervals(const PatternTerm& t, int64_t h, int64_t i0, int64_t i1, int64_t, int64_t, int64_t,
                            std::vector<KeyInterval>& out) {
    const int64_t head = t.table_heads == 1 ? 0 : h;
    for (int64_t row = i0 / t.a; row <= i1 / t.a; ++row) {
      const int64_t r = head * t.table_rows + row;
      for (int64_t at = t.offsets[r]; at < t.offsets[r + 1]; ++at)
        out.push_back({t.indices[at] * t.b, t.indices[at] * t.b + t.b - 1});
    }
  }

  // Block rows live on the row-index grid: i = p - shift.
  static uint64_t lane_bits(const PatternTerm& t, int64_t h, const TileLanes& lanes, int64_t j) {
    const int64_t i0 = lanes.p0 - lanes.shift, kb = j / t.b;
    const int64_t rb_last = (i0 + lanes.rows - 1) / t.a;
    uint64_t bits = 0;
    for (int64_t rb = i0 / t.a; rb <= rb_last; ++rb)
      if (custom_block_kept(t, h, rb, kb))
        bits |= lanes.interval(rb * t.a + lanes.shift, rb * t.a + t.a - 1 + lanes.shift);
    return bits;
  }
};

}  // namespace terms
}  // namespace spattn
