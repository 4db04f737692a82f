// spattn/pattern_terms.hpp - the one definition of every pattern's predicate.
//
// A pattern is, per head, an OR or AND of up to kMaxTerms terms. A term is a
// plain struct (kind, causal flag, three integer parameters, pointers to
// read-only tables), so the same code runs on the host and on the GPU.
//
// Positions: query row i sits at absolute position p = i + (Lk - Lq)
// (bottom-right alignment); j is the key index. Every function gets both i and
// p: block-level custom masks are laid on the (i, j) grid, everything else on
// (p, j). `causal` ANDs j <= p.
//
// Two questions are answered per term:
//   term_allows(t, h, i, p, j)           - is the pair allowed?
//   term_count_row(t, h, i, p, j0, j1)   - how many keys in [j0, j1] are allowed
//                                           for this row (closed form where possible)?
// The BlockMask builder classifies blocks with the counts; the backends apply
// term_allows (through expr_allows) inside partial blocks.
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"

namespace spattn {

enum class TermKind : int32_t {
  Dense = 0,          // every key (with causal: the "causal" pattern)
  BlockDiagonal = 1,  // a = block size B: floor(p/B) == floor(j/B)
  SlidingWindow = 2,  // a = left, b = right: p - left <= j <= p + right
  Streaming = 3,      // a = sink S, b = window W (causal): j < S or p - j < W
  Strided = 4,        // a = stride l (causal): p - j < l or (p - j) % l == 0
  Fixed = 5,          // a = stride l, b = summary c (causal): same l-segment or j % l >= l - c
  Dilated = 6,        // a = segment w, b = rate r: same w-segment and p % r == j % r == h % r
  BigBird = 7,        // a = block B, b = window blocks w, c = global blocks g; table = random blocks
  Longformer = 8,     // a = window W: |p - j| <= W/2, or j in G, or p in G; tokens = G (sorted)
  Custom = 9,         // a = block_q, b = block_k; CSR of kept blocks on the (i, j) grid
};

constexpr int kMaxTerms = 8;

struct PatternTerm {
  TermKind kind = TermKind::Dense;
  int32_t causal = 0;
  int64_t a = 0, b = 0, c = 0;
  // BigBird: random blocks, table_rows x table_width int32 (-1 = unused slot).
  // Custom: CSR column indices; offsets has table_heads * table_rows + 1 entries.
  const int32_t* indices = nullptr;
  const int64_t* offsets = nullptr;
  // Longformer: sorted global token positions.
  const int64_t* tokens = nullptr;
  int64_t table_rows = 0;   // BigBird: blocks n; Custom: query-block rows per head
  int64_t table_width = 0;  // BigBird: random blocks r; Custom: key-block columns
  int64_t table_heads = 0;  // Custom: 1 (shared) or H
  int64_t num_tokens = 0;   // Longformer: |G|
};

enum class ExprOp : int32_t { Or = 0, And = 1 };

struct PatternExpr {
  ExprOp op = ExprOp::Or;
  int32_t num_terms = 0;
  PatternTerm terms[kMaxTerms];
};

namespace pattern_math {

SPATTN_HD int64_t min64(int64_t x, int64_t y) { return x < y ? x : y; }
SPATTN_HD int64_t max64(int64_t x, int64_t y) { return x > y ? x : y; }
SPATTN_HD int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

// ceil(x / m) for x >= 0 and m > 0, without the overflow of (x + m - 1) / m.
SPATTN_HD int64_t ceil_div(int64_t x, int64_t m) { return x / m + (x % m != 0 ? 1 : 0); }

// floor(x / m) for m > 0 and any sign of x.
SPATTN_HD int64_t floor_div(int64_t x, int64_t m) {
  const int64_t q = x / m;
  return (x % m != 0 && x < 0) ? q - 1 : q;
}

// Size of [lo, hi] intersected with [j0, j1] (inclusive bounds).
SPATTN_HD int64_t overlap(int64_t lo, int64_t hi, int64_t j0, int64_t j1) {
  const int64_t n = min64(hi, j1) - max64(lo, j0) + 1;
  return n > 0 ? n : 0;
}

// Size of the inclusive interval [lo, hi] (0 when empty).
SPATTN_HD int64_t interval_size(int64_t lo, int64_t hi) { return hi >= lo ? hi - lo + 1 : 0; }

// Number of j in [lo, hi] with j mod m == r (0 <= r < m).
SPATTN_HD int64_t count_congruent(int64_t lo, int64_t hi, int64_t m, int64_t r) {
  if (hi < lo) return 0;
  return floor_div(hi - r, m) - floor_div(lo - 1 - r, m);
}

// Number of j in [0, n) with j mod m >= t (0 <= t <= m).
SPATTN_HD int64_t count_residue_at_least_prefix(int64_t n, int64_t m, int64_t t) {
  if (n <= 0) return 0;
  return (n / m) * (m - t) + max64(0, n % m - t);
}

// Number of j in [lo, hi] with j mod m >= t, lo >= 0.
SPATTN_HD int64_t count_residue_at_least(int64_t lo, int64_t hi, int64_t m, int64_t t) {
  if (hi < lo) return 0;
  return count_residue_at_least_prefix(hi + 1, m, t) - count_residue_at_least_prefix(lo, m, t);
}

// Index of the first element >= x in sorted a[0, n).
template <typename T>
SPATTN_HD int64_t lower_bound(const T* a, int64_t n, int64_t x) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(a[mid]) < x) lo = mid + 1; else hi = mid;
  }
  return lo;
}

}  // namespace pattern_math

// ---- BigBird block relation -------------------------------------------------

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

// ---- the predicate ----------------------------------------------------------

SPATTN_HD bool term_allows(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t j) {
  using namespace pattern_math;
  if (t.causal && j > p) return false;
  switch (t.kind) {
    case TermKind::Dense: return true;
    case TermKind::BlockDiagonal: return floor_div(p, t.a) == floor_div(j, t.a);
    case TermKind::SlidingWindow: return p - t.a <= j && j <= p + t.b;
    case TermKind::Streaming: return j < t.a || p - j < t.b;
    case TermKind::Strided: return p - j < t.a || (p - j) % t.a == 0;
    case TermKind::Fixed: return floor_div(j, t.a) == floor_div(p, t.a) || j % t.a >= t.a - t.b;
    case TermKind::Dilated: {
      const int64_t r = t.b, hr = h % r;
      return floor_div(p, t.a) == floor_div(j, t.a) && p - floor_div(p, r) * r == hr && j % r == hr;
    }
    case TermKind::BigBird: return bigbird_blocks_connected(t, floor_div(p, t.a), j / t.a);
    case TermKind::Longformer:
      return abs64(p - j) <= t.a / 2 || longformer_is_global(t, j) || longformer_is_global(t, p);
    case TermKind::Custom: return custom_block_kept(t, h, i / t.a, j / t.b);
  }
  return false;
}

SPATTN_HD bool expr_allows(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j) {
  if (e.op == ExprOp::And) {
    for (int32_t n = 0; n < e.num_terms; ++n)
      if (!term_allows(e.terms[n], h, i, p, j)) return false;
    return true;
  }
  for (int32_t n = 0; n < e.num_terms; ++n)
    if (term_allows(e.terms[n], h, i, p, j)) return true;
  return false;
}

// ---- row counts (used to classify blocks as empty, partial or full) --------

// Number of keys j in [j0, j1] (0 <= j0 <= j1) that the term allows for row (i, p).
SPATTN_HD int64_t term_count_row(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t j0,
                                 int64_t j1) {
  using namespace pattern_math;
  if (t.causal) j1 = min64(j1, p);
  if (j1 < j0) return 0;
  switch (t.kind) {
    case TermKind::Dense: return j1 - j0 + 1;
    case TermKind::BlockDiagonal: {
      const int64_t s = floor_div(p, t.a) * t.a;
      return overlap(s, s + t.a - 1, j0, j1);
    }
    case TermKind::SlidingWindow: return overlap(p - t.a, p + t.b, j0, j1);
    case TermKind::Streaming:
      return overlap(0, t.a - 1, j0, j1) + overlap(max64(t.a, p - t.b + 1), p, j0, j1);
    case TermKind::Strided: {
      const int64_t l = t.a;
      const int64_t window = overlap(p - l + 1, p, j0, j1);
      const int64_t far = count_congruent(j0, min64(j1, p - l), l, p - floor_div(p, l) * l);
      return window + far;
    }
    case TermKind::Fixed: {
      const int64_t l = t.a, first_summary = t.a - t.b;
      const int64_t seg_lo = max64(floor_div(p, l) * l, j0), seg_hi = min64(p, j1);
      const int64_t in_segment = seg_hi >= seg_lo ? seg_hi - seg_lo + 1 : 0;
      const int64_t summary = count_residue_at_least(j0, j1, l, first_summary);
      const int64_t summary_in_segment =
          in_segment ? count_residue_at_least(seg_lo, seg_hi, l, first_summary) : 0;
      return in_segment + summary - summary_in_segment;
    }
    case TermKind::Dilated: {
      const int64_t w = t.a, r = t.b, hr = h % r;
      if (p - floor_div(p, r) * r != hr) return 0;
      const int64_t s = floor_div(p, w) * w;
      return count_congruent(max64(s, j0), min64(s + w - 1, j1), r, hr);
    }
    case TermKind::BigBird: {
      const int64_t B = t.a, qb = floor_div(p, B);
      int64_t n = 0;
      for (int64_t kb = j0 / B; kb <= j1 / B; ++kb)
        if (bigbird_blocks_connected(t, qb, kb)) n += overlap(kb * B, kb * B + B - 1, j0, j1);
      return n;
    }
    case TermKind::Longformer: {
      if (longformer_is_global(t, p)) return j1 - j0 + 1;
      const int64_t half = t.a / 2;
      const int64_t w_lo = max64(p - half, j0), w_hi = min64(p + half, j1);
      const int64_t in_window = w_hi >= w_lo ? w_hi - w_lo + 1 : 0;
      const int64_t g_all = lower_bound(t.tokens, t.num_tokens, j1 + 1) -
                            lower_bound(t.tokens, t.num_tokens, j0);
      const int64_t g_window = in_window ? lower_bound(t.tokens, t.num_tokens, w_hi + 1) -
                                               lower_bound(t.tokens, t.num_tokens, w_lo)
                                         : 0;
      return in_window + g_all - g_window;
    }
    case TermKind::Custom: {
      const int64_t head = t.table_heads == 1 ? 0 : h;
      const int64_t r = head * t.table_rows + i / t.a;
      const int64_t begin = t.offsets[r], end = t.offsets[r + 1];
      int64_t n = 0;
      for (int64_t at = begin + lower_bound(t.indices + begin, end - begin, j0 / t.b); at < end; ++at) {
        const int64_t kb = t.indices[at];
        if (kb * t.b > j1) break;
        n += overlap(kb * t.b, kb * t.b + t.b - 1, j0, j1);
      }
      return n;
    }
  }
  return 0;
}

// Number of keys in [j0, j1] the expression allows for row (i, p). Uses the
// per-term closed forms and falls back to testing each key only where the
// terms disagree.
SPATTN_HD int64_t expr_count_row(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t j0,
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
  for (int64_t j = j0; j <= j1; ++j) n += expr_allows(e, h, i, p, j) ? 1 : 0;
  return n;
}

}  // namespace spattn
