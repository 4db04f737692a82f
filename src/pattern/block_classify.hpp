// block_classify.hpp - classification of a (query block, key block)
// rectangle as empty, partial or full: per term in closed form where its kind
// has one (classify_block of pattern/terms/<kind>.hpp), for an expression from
// its terms' classes, and exactly by counting allowed keys row by row where no
// closed form decides (expr_classify_block_exact). Everything here is
// SPATTN_HD: the host builder (block_mask_build.cpp) and the device builder
// (cuda/plan/device_mask_build.cu) classify with this same code.
#pragma once

#include <cstdint>

#include "pattern/terms/term_forms.hpp"
#include "pattern/terms/term_kinds.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn {

SPATTN_HD BlockClass term_classify_block(const PatternTerm& t, int64_t h, const BlockRect& r) {
  const bool causal = t.causal != 0;
  SPATTN_SWITCH_TERM_KIND(t.kind, Kind, return BlockClass::Unknown;, return Kind::classify_block(t, h, r, causal);)
}

// The call's rectangle in the pattern's own coordinates (PositionFrame).
SPATTN_HD BlockRect framed_rect(const PositionFrame& f, const BlockRect& r) {
  return BlockRect{framed_row(f, r.i0), framed_row(f, r.i1), framed_position(f, r.i0, r.p0),
                   framed_position(f, r.i1, r.p1), framed_key(f, r.j0), framed_key(f, r.j1)};
}

// Classification of an OR/AND expression from its terms' classifications;
// Unknown where they cannot decide it together. `call` is the rectangle in
// the call's coordinates.
SPATTN_HD BlockClass expr_classify_block(const PatternExpr& e, int64_t h, const BlockRect& call) {
  const BlockRect r = framed_rect(e.frame, call);
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

// Does the call's row (i, p) allow some key of [j0, j1], and does it block some? Decided
// from the terms' closed-form counts where bounds suffice (a union allows at
// least the largest count and at most the sum; an intersection at least
// sum - (n-1) * width and at most the smallest), else by the exact count.
SPATTN_HD void expr_row_status(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j0,
                               int64_t j1, bool& some_allowed, bool& some_blocked) {
  using pattern_math::max64;
  using pattern_math::min64;
  const int64_t width = j1 - j0 + 1;
  const PositionFrame& f = e.frame;
  p = framed_position(f, i, p);
  i = framed_row(f, i);
  j0 = framed_key(f, j0);
  j1 = framed_key(f, j1);
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
    low = high = expr_count_row_at(e, h, i, p, j0, j1);
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
