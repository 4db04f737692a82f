// block_classify.hpp - constant-time classification of a (query block, key
// block) rectangle as empty, partial or full, for the patterns with a closed
// form.
//
// Most terms allow, per query position p, one key interval [a(p), b(p)] whose
// ends never decrease with p and whose union over a block of rows is
// contiguous (windows, causal, segments, sinks). For those the rectangle
// p in [p0, p1] x j in [j0, j1] is full iff a(p1) <= j0 and b(p0) >= j1, and
// empty iff j1 < a(p0) or j0 > b(p1). Diagonal terms (strided) depend only on
// d = p - j, and every d in [p0 - j1, p1 - j0] occurs in the rectangle. Where
// no closed form applies, Unknown sends the caller to exact row counting
// (expr_classify_block_exact at the end). Everything here is SPATTN_HD: the
// host builder (block_mask_build.cpp) and the device builder
// (cuda/plan/device_mask_build.cu) classify with this same code.
#pragma once

#include <cstdint>

#include "spattn/pattern_terms.hpp"

namespace spattn {

enum class BlockClass : int32_t { Empty = 0, Partial = 1, Full = 2, Unknown = 3 };

struct BlockRect {
  int64_t i0, i1;  // query rows (inclusive)
  int64_t p0, p1;  // their positions
  int64_t j0, j1;  // keys (inclusive)
};

namespace block_classify {

using pattern_math::floor_div;
using pattern_math::max64;
using pattern_math::min64;

// Rows allow [a(p), b(p)], both ends non-decreasing in p and the union over
// the rows contiguous; a and b given at the block's first and last rows.
SPATTN_HD BlockClass monotone_interval(const BlockRect& r, int64_t a_first, int64_t a_last,
                                       int64_t b_first, int64_t b_last) {
  if (r.j1 < a_first || r.j0 > b_last) return BlockClass::Empty;
  if (a_last <= r.j0 && b_first >= r.j1) return BlockClass::Full;
  return BlockClass::Partial;
}

// Rows allow [p + lo, p + hi], clamped to j <= p when causal.
SPATTN_HD BlockClass shifted_interval(const BlockRect& r, int64_t lo, int64_t hi, bool causal) {
  if (causal) hi = min64(hi, 0);
  if (hi < lo) return BlockClass::Empty;
  return monotone_interval(r, r.p0 + lo, r.p1 + lo, r.p0 + hi, r.p1 + hi);
}

// Rows allow [0, p].
SPATTN_HD BlockClass causal_prefix(const BlockRect& r) { return monotone_interval(r, 0, 0, r.p0, r.p1); }

// Rows allow [floor(p/B)*B, floor(p/B)*B + B - 1], or up to p when causal.
SPATTN_HD BlockClass segment(const BlockRect& r, int64_t B, bool causal) {
  const int64_t s_first = floor_div(r.p0, B) * B, s_last = floor_div(r.p1, B) * B;
  return monotone_interval(r, s_first, s_last, causal ? r.p0 : s_first + B - 1,
                           causal ? r.p1 : s_last + B - 1);
}

// Strided: pairs depend only on d = p - j; allowed d are [0, l-1] and the
// multiples of l, and every d in [p0 - j1, p1 - j0] occurs in the rectangle.
SPATTN_HD BlockClass strided_diagonals(const BlockRect& r, int64_t l) {
  const int64_t d_lo = r.p0 - r.j1, d_hi = r.p1 - r.j0;
  if (d_hi < 0) return BlockClass::Empty;
  if (l == 1) return d_lo >= 0 ? BlockClass::Full : BlockClass::Partial;
  if (d_lo >= 0 && d_hi <= l) return BlockClass::Full;
  if (d_lo == d_hi) return d_lo % l == 0 ? BlockClass::Full : BlockClass::Empty;
  if (d_lo <= l) return BlockClass::Partial;
  const int64_t first_multiple = ((d_lo + l - 1) / l) * l;
  return first_multiple <= d_hi ? BlockClass::Partial : BlockClass::Empty;
}

// Keys grouped in columns of `width` keys (BigBird or custom cells, single
// global tokens) that every row of the rectangle keeps or drops as a whole.
// `kept` counts the kept columns among the rectangle's `columns`;
// `kept_causal` those among them holding a key j <= p1 (when causal, the only
// ones with allowed pairs).
SPATTN_HD BlockClass kept_columns(const BlockRect& r, bool causal, int64_t columns, int64_t kept,
                                  int64_t kept_causal) {
  if (causal) {
    if (kept_causal == 0) return BlockClass::Empty;
    return kept == columns ? causal_prefix(r) : BlockClass::Partial;
  }
  if (kept == 0) return BlockClass::Empty;
  return kept == columns ? BlockClass::Full : BlockClass::Partial;
}

// Rows that either allow every key (`kept_rows` of the rectangle's rows, e.g.
// Longformer's global queries) or none; `kept_rows_causal` counts the kept
// rows at positions p >= j0 (when causal, the only ones with allowed pairs).
SPATTN_HD BlockClass kept_rows(const BlockRect& r, bool causal, int64_t kept, int64_t kept_causal) {
  const int64_t rows = r.p1 - r.p0 + 1;
  if (causal) {
    if (kept_causal == 0) return BlockClass::Empty;
    return kept == rows ? causal_prefix(r) : BlockClass::Partial;
  }
  if (kept == 0) return BlockClass::Empty;
  return kept == rows ? BlockClass::Full : BlockClass::Partial;
}

// Class of the union of two predicates: full if either is, else the other one
// when one is empty; two partial ones (or an unknown one) stay undecided.
SPATTN_HD BlockClass union_of(BlockClass a, BlockClass b) {
  if (a == BlockClass::Full || b == BlockClass::Full) return BlockClass::Full;
  if (a == BlockClass::Unknown || b == BlockClass::Unknown) return BlockClass::Unknown;
  if (a == BlockClass::Empty) return b;
  if (b == BlockClass::Empty) return a;
  return BlockClass::Unknown;
}

}  // namespace block_classify

SPATTN_HD BlockClass term_classify_block(const PatternTerm& t, int64_t h, const BlockRect& r) {
  using namespace block_classify;
  const bool causal = t.causal != 0;
  switch (t.kind) {
    case TermKind::Dense: return causal ? causal_prefix(r) : BlockClass::Full;
    case TermKind::SlidingWindow: return shifted_interval(r, -t.a, t.b, causal);
    case TermKind::BlockDiagonal: return segment(r, t.a, causal);
    case TermKind::Streaming: {
      // Keys below S follow the causal rule alone; keys from S on follow the window.
      const int64_t S = t.a, W = t.b;
      const bool has_sink = r.j0 < S, has_window = r.j1 >= S;
      BlockRect sink_part = r, window_part = r;
      sink_part.j1 = min64(r.j1, S - 1);
      window_part.j0 = max64(r.j0, S);
      const BlockClass sink = has_sink ? causal_prefix(sink_part) : BlockClass::Empty;
      const BlockClass window =
          has_window ? monotone_interval(window_part, max64(S, r.p0 - W + 1), max64(S, r.p1 - W + 1),
                                         r.p0, r.p1)
                     : BlockClass::Empty;
      if (!has_sink) return window;
      if (!has_window) return sink;
      if (sink == BlockClass::Full && window == BlockClass::Full) return BlockClass::Full;
      if (sink == BlockClass::Empty && window == BlockClass::Empty) return BlockClass::Empty;
      return BlockClass::Partial;
    }
    case TermKind::Strided: return strided_diagonals(r, t.a);
    case TermKind::Fixed: {
      // Keys that are all summary columns follow the causal rule; keys with no
      // summary column follow the causal segment rule; mixed keys: no closed form.
      const int64_t summary =
          pattern_math::count_residue_at_least(r.j0, r.j1, t.a, t.a - t.b);
      if (summary == 0) return segment(r, t.a, true);
      if (summary == r.j1 - r.j0 + 1) return causal_prefix(r);
      return BlockClass::Unknown;
    }
    case TermKind::Dilated: {
      const int64_t rate = t.b, hr = h % rate;
      const BlockClass seg = segment(r, t.a, causal);
      if (rate == 1 || seg == BlockClass::Empty) return seg;
      if (seg != BlockClass::Full) return BlockClass::Unknown;
      const bool row_active = pattern_math::count_congruent(r.p0, r.p1, rate, hr) > 0;
      const bool key_active = pattern_math::count_congruent(r.j0, r.j1, rate, hr) > 0;
      if (!row_active || !key_active) return BlockClass::Empty;
      return r.p0 == r.p1 && r.j0 == r.j1 ? BlockClass::Full : BlockClass::Partial;
    }
    case TermKind::Longformer: {
      // Union of the window, the global keys (whole columns) and the global
      // queries (whole rows).
      const BlockClass window = shifted_interval(r, -(t.a / 2), t.a / 2, causal);
      const BlockClass keys = kept_columns(
          r, causal, r.j1 - r.j0 + 1, longformer_global_count(t, r.j0, r.j1),
          causal ? longformer_global_count(t, r.j0, min64(r.j1, r.p1)) : 0);
      const BlockClass rows = kept_rows(r, causal, longformer_global_count(t, r.p0, r.p1),
                                        causal ? longformer_global_count(t, max64(r.p0, r.j0), r.p1) : 0);
      return union_of(window, union_of(keys, rows));
    }
    case TermKind::BigBird: {
      // Rows inside one query block of BigBird's grid; keys in any number of its columns.
      const int64_t B = t.a, qb = floor_div(r.p0, B);
      if (floor_div(r.p1, B) != qb) return BlockClass::Unknown;
      const int64_t kb0 = r.j0 / B, kb1 = r.j1 / B, last_causal = min64(r.j1, r.p1);
      const int64_t kept_causal =
          causal && last_causal >= r.j0 ? bigbird_connected_count(t, qb, kb0, last_causal / B) : 0;
      return kept_columns(r, causal, kb1 - kb0 + 1, bigbird_connected_count(t, qb, kb0, kb1), kept_causal);
    }
    case TermKind::Custom: {
      // Rows inside one row of the custom grid (on i); keys in any number of its columns.
      const int64_t row = r.i0 / t.a;
      if (r.i1 / t.a != row) return BlockClass::Unknown;
      const int64_t c0 = r.j0 / t.b, c1 = r.j1 / t.b, last_causal = min64(r.j1, r.p1);
      const int64_t kept_causal =
          causal && last_causal >= r.j0 ? custom_kept_count(t, h, row, c0, last_causal / t.b) : 0;
      return kept_columns(r, causal, c1 - c0 + 1, custom_kept_count(t, h, row, c0, c1), kept_causal);
    }
  }
  return BlockClass::Unknown;
}

// Classification of an OR/AND expression from its terms' classifications;
// Unknown where they cannot decide it together.
SPATTN_HD BlockClass expr_classify_block(const PatternExpr& e, int64_t h, const BlockRect& r) {
  int32_t empty = 0, full = 0, partial = 0;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    const BlockClass c = term_classify_block(e.terms[n], h, r);
    if (c == BlockClass::Unknown) return BlockClass::Unknown;
    empty += c == BlockClass::Empty;
    full += c == BlockClass::Full;
    partial += c == BlockClass::Partial;
  }
  if (e.op == ExprOp::Or) {
    if (full) return BlockClass::Full;
    if (partial == 0) return BlockClass::Empty;
    return partial == 1 ? BlockClass::Partial : BlockClass::Unknown;
  }
  if (empty) return BlockClass::Empty;
  if (partial == 0) return BlockClass::Full;
  return partial == 1 ? BlockClass::Partial : BlockClass::Unknown;
}

// Does row (i, p) allow some key of [j0, j1], and does it block some? Decided
// from the terms' closed-form counts where bounds suffice (a union allows at
// least the largest count and at most the sum; an intersection at least
// sum - (n-1) * width and at most the smallest), else by the exact count.
SPATTN_HD void expr_row_status(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j0,
                               int64_t j1, bool& some_allowed, bool& some_blocked) {
  using pattern_math::max64;
  using pattern_math::min64;
  const int64_t width = j1 - j0 + 1;
  int64_t low = 0, high = 0;
  if (e.num_terms > 1) {
    int64_t smallest = width, largest = 0, sum = 0;
    for (int32_t n = 0; n < e.num_terms; ++n) {
      const int64_t c = term_count_row(e.terms[n], h, i, p, j0, j1);
      smallest = min64(smallest, c);
      largest = max64(largest, c);
      sum += c;
    }
    low = e.op == ExprOp::Or ? largest : max64(0, sum - (e.num_terms - 1) * width);
    high = e.op == ExprOp::Or ? min64(sum, width) : smallest;
  }
  if (e.num_terms == 1 || (low == 0 && high > 0) || (low < width && high == width)) {
    low = high = expr_count_row(e, h, i, p, j0, j1);
  }
  some_allowed |= low > 0;
  some_blocked |= high < width;
}

// Exact class of the rectangle of query rows [i0, i1] (positions i + offset)
// and keys [j0, j1]: the closed forms where they decide, else row by row
// (stopping as soon as the block is known to be partial).
SPATTN_HD BlockClass expr_classify_block_exact(const PatternExpr& e, int64_t h, int64_t i0, int64_t i1,
                                               int64_t offset, int64_t j0, int64_t j1) {
  const BlockClass quick = expr_classify_block(e, h, BlockRect{i0, i1, i0 + offset, i1 + offset, j0, j1});
  if (quick != BlockClass::Unknown) return quick;
  bool some_allowed = false, some_blocked = false;
  for (int64_t i = i0; i <= i1; ++i) {
    expr_row_status(e, h, i, i + offset, j0, j1, some_allowed, some_blocked);
    if (some_allowed && some_blocked) return BlockClass::Partial;
  }
  return some_allowed ? BlockClass::Full : BlockClass::Empty;
}

}  // namespace spattn
