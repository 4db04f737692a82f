// spattn/pattern_terms.hpp - the one definition of every pattern's predicate.
//
// A pattern is, per head, an OR or AND of up to kMaxTerms terms
// (spattn/pattern_expr.hpp). Each term kind is defined, with everything the
// library derives from it, in its own file (pattern/terms/<kind>.hpp, reached
// through pattern/terms/term_kinds.hpp); this header answers the two questions
// every backend asks, for a term and for an expression:
//
//   term_allows(t, h, i, p, j)           - is the pair allowed?
//   term_count_row(t, h, i, p, j0, j1)   - how many keys in [j0, j1] are allowed
//                                           for this row (closed form where possible)?
//
// Positions: query row i sits at absolute position p = i + (Lk - Lq)
// (bottom-right alignment); j is the key index. Every function gets both i and
// p: block-level custom masks are laid on the (i, j) grid, everything else on
// (p, j). `causal` ANDs j <= p. The BlockMask builder classifies blocks with
// the counts; the backends apply term_allows (through expr_allows) inside
// partial blocks. Host and device. The expression-level functions take a
// call's coordinates and translate them through the expression's frame
// (PositionFrame, pattern_expr.hpp) once; the term-level ones and the *_at
// forms take the coordinates of the problem the pattern is defined on.
#pragma once

#include <cstdint>

#include "pattern/terms/term_kinds.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn {

// ---- the predicate ----------------------------------------------------------

SPATTN_HD bool term_allows(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t j) {
  if (t.causal && j > p) return false;
  SPATTN_SWITCH_TERM_KIND(t.kind, Kind, return false;, return Kind::allows(t, h, i, p, j);)
}

// ---- the frame ---------------------------------------------------------------

// A call's query row i (at position p) and key j in the problem the pattern
// is defined on.
SPATTN_HD int64_t framed_row(const PositionFrame& f, int64_t i) { return i + f.row; }
SPATTN_HD int64_t framed_position(const PositionFrame& f, int64_t i, int64_t p) { return f.on ? i + f.position : p; }
SPATTN_HD int64_t framed_key(const PositionFrame& f, int64_t j) { return j + f.key; }

SPATTN_HD bool expr_allows_at(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j) {
  if (e.op == ExprOp::And) {
    for (int32_t n = 0; n < e.num_terms; ++n)
      if (!term_allows(e.terms[n], h, i, p, j)) return false;
    return true;
  }
  for (int32_t n = 0; n < e.num_terms; ++n)
    if (term_allows(e.terms[n], h, i, p, j)) return true;
  return false;
}

// Is key j allowed for the call's query row i at position p?
SPATTN_HD bool expr_allows(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j) {
  const PositionFrame& f = e.frame;
  return expr_allows_at(e, h, framed_row(f, i), framed_position(f, i, p), framed_key(f, j));
}

// ---- row counts (used to classify blocks as empty, partial or full) --------

// Number of keys j in [j0, j1] (0 <= j0 <= j1) that the term allows for row (i, p).
SPATTN_HD int64_t term_count_row(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t j0,
                                 int64_t j1) {
  if (t.causal) j1 = pattern_math::min64(j1, p);
  if (j1 < j0) return 0;
  SPATTN_SWITCH_TERM_KIND(t.kind, Kind, return 0;, return Kind::count_row(t, h, i, p, j0, j1);)
}

// Number of keys in [j0, j1] the expression allows for row (i, p), in the
// pattern's own coordinates. Uses the per-term closed forms and falls back to
// testing each key only where the terms disagree.
SPATTN_HD int64_t expr_count_row_at(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j0,
                                    int64_t j1) {
  if (e.num_terms == 1) return term_count_row(e.terms[0], h, i, p, j0, j1);
  const int64_t width = j1 - j0 + 1;
  bool any_full = false, any_empty = false, all_full = true, all_empty = true;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    const int64_t c = term_count_row(e.terms[n], h, i, p, j0, j1);
    any_full |= c == width;
    any_empty |= c == 0;
    all_full &= c == width;
    all_empty &= c == 0;
  }
  if (e.op == ExprOp::Or) {
    if (any_full) return width;
    if (all_empty) return 0;
  } else {
    if (any_empty) return 0;
    if (all_full) return width;
  }
  int64_t n = 0;
  for (int64_t j = j0; j <= j1; ++j) n += expr_allows_at(e, h, i, p, j) ? 1 : 0;
  return n;
}

// The same for the call's row i (at position p) and keys [j0, j1].
SPATTN_HD int64_t expr_count_row(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j0,
                                 int64_t j1) {
  const PositionFrame& f = e.frame;
  return expr_count_row_at(e, h, framed_row(f, i), framed_position(f, i, p), framed_key(f, j0),
                           framed_key(f, j1));
}

}  // namespace spattn
