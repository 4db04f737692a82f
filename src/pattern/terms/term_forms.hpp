// pattern/terms/term_forms.hpp - the shapes in which the pattern kinds
// (pattern/terms/*.hpp) give the forms the library derives from a term:
//
//   BlockRect / BlockClass  a rectangle of query rows and keys, and whether it
//                           is empty, partial or full (with the closed forms
//                           most kinds classify with: monotone intervals,
//                           segments, kept columns or rows);
//   KeyInterval             keys that can hold a block of rows' allowed keys;
//   TileLanes               a CPU tile's query rows as the bits of a 64-bit
//                           word, one lane per row;
//   span_word               keys of an arithmetic span among 64 consecutive
//                           keys as the bits of a word (the GPU row words).
//
// Host and device where the device uses it (KeyInterval and TileLanes are
// host only). Installed with the public headers.
#pragma once

#include <cstdint>

#include "pattern/terms/term_math.hpp"
#include "spattn/hd.hpp"

namespace spattn {

// ---- block classification ----------------------------------------------------

enum class BlockClass : int32_t { Empty = 0, Partial = 1, Full = 2, Unknown = 3 };

struct BlockRect {
  int64_t i0, i1;  // query rows (inclusive)
  int64_t p0, p1;  // their positions
  int64_t j0, j1;  // keys (inclusive)
};

// Most terms allow, per query position p, one key interval [a(p), b(p)] whose
// ends never decrease with p and whose union over a block of rows is
// contiguous (windows, causal, segments, sinks). For those the rectangle
// p in [p0, p1] x j in [j0, j1] is full iff a(p1) <= j0 and b(p0) >= j1, and
// empty iff j1 < a(p0) or j0 > b(p1).
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

// ---- candidate key intervals (host) -----------------------------------------

struct KeyInterval {
  int64_t lo, hi;  // inclusive key positions
};

// ---- CPU lane bits (host) ---------------------------------------------------

// A tile of up to 64 consecutive query rows: lane n is query position p0 + n
// (row p0 + n - shift).
struct TileLanes {
  int64_t p0 = 0;
  int64_t rows = 0;   // 1..64
  int64_t shift = 0;  // Lk - Lq

  uint64_t all() const { return rows == 64 ? ~uint64_t{0} : (uint64_t{1} << rows) - 1; }

  // Lanes whose position lies in [lo, hi].
  uint64_t interval(int64_t lo, int64_t hi) const {
    const int64_t a = lo - p0 > 0 ? lo - p0 : 0;
    const int64_t b = hi - p0 < rows - 1 ? hi - p0 : rows - 1;
    if (a > b) return 0;
    const int64_t n = b - a + 1;
    return (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1) << a;
  }
  int64_t last() const { return p0 + rows - 1; }
  uint64_t at_most(int64_t hi) const { return interval(p0, hi); }
  uint64_t at_least(int64_t lo) const { return interval(lo, last()); }

  // Lanes whose position lies in [lo, hi] and is congruent to residue mod step.
  uint64_t stepped(int64_t lo, int64_t hi, int64_t step, int64_t residue) const {
    if (lo < p0) lo = p0;
    if (hi > last()) hi = last();
    uint64_t bits = 0;
    for (int64_t p = lo + pattern_math::positive_mod(residue - lo, step); p <= hi; p += step)
      bits |= uint64_t{1} << (p - p0);
    return bits;
  }
};

// ---- GPU row words ------------------------------------------------------------

namespace pattern_math {

// Bits [lo, hi] of a 64-bit word (0 <= lo, hi < 64; none when hi < lo).
SPATTN_HD uint64_t bit_run(int lo, int hi) {
  if (hi < lo) return 0;
  return (~uint64_t{0} >> (63 - hi)) & (~uint64_t{0} << lo);
}

// Bits 0, m, 2m, ... of a 64-bit word (m >= 1), by doubling: log2(64 / m) steps.
SPATTN_HD uint64_t multiples_of(int m) {
  uint64_t bits = 1;
  for (int step = m; step < 64; step *= 2) bits |= bits << step;
  return bits;
}

// The keys k0 + k (bit k, k < 64) that lie in [lo, hi] and are congruent to
// `residue` modulo `stride`.
SPATTN_HD uint64_t span_word(int64_t lo, int64_t hi, int64_t stride, int64_t residue, int64_t k0) {
  if (hi < lo || hi < k0 || lo >= k0 + 64) return 0;
  const int lo_rel = lo - k0 < 0 ? 0 : static_cast<int>(lo - k0);
  const int hi_rel = hi - k0 >= 63 ? 63 : static_cast<int>(hi - k0);
  const uint64_t run = bit_run(lo_rel, hi_rel);
  if (stride <= 1) return run;
  const int64_t first = positive_mod(residue - k0, stride);  // the first congruent key's bit
  if (first >= 64) return 0;
  return stride >= 64 ? run & (uint64_t{1} << first) : run & (multiples_of(static_cast<int>(stride)) << first);
}

}  // namespace pattern_math

}  // namespace spattn
