// cuda/common/row_key_bits.hpp - the pattern predicate of one query row over
// 64 consecutive keys, as a 64-bit word (bit k: key k0 + k), without testing
// key by key, and a thread's columns of such a word in the mma C layout.
//
// For the terms whose allowed keys in a row form up to two arithmetic spans
// {lo <= j <= hi, j = residue mod stride} - dense, sliding window,
// block-diagonal, streaming, strided, dilated - the row's spans are derived
// once from the term's definition (pattern/terms/<kind>.hpp) and turned into
// the word with a few shifts and masks (pattern_math::span_word). A custom
// block mask's row is the union of its kept blocks among the segment's (the
// kind's row_word). Other terms (fixed, BigBird, Longformer) report that they
// have no span form, and the caller tests their keys one by one with
// expr_allows. The spans are the one form of a kind written here rather than
// in the kind's file: given by the kinds, they change the code the kernels
// compile to (the same instructions, other register numbers). In the mma C
// layout a thread owns, of every 8 consecutive keys of a tile, the pair
// first_col, first_col + 1 (thread_columns picks them out of a word). Host
// and device (unit-tested on the host against expr_allows).
#pragma once

#include <cstdint>

#include "pattern/terms/custom.hpp"
#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

// Bound for spans open on one side; term parameters are clamped to it first, so
// no sum below overflows.
constexpr int64_t kSpanInfinity = int64_t{1} << 50;

SPATTN_HD int64_t clamp_param(int64_t x) { return x < kSpanInfinity ? x : kSpanInfinity; }

// A thread's 8 columns of 32 consecutive keys in the mma C layout: bit
// 2 n + c is key 8 n + first_col + c (n < 4, c < 2), for bit x of `keys` key x.
SPATTN_HD uint32_t quarter_columns(uint32_t keys, int first_col) {
  uint32_t x = (keys >> first_col) & 0x03030303u;  // byte n: the thread's pair of keys 8 n ..
  x = (x | (x >> 6)) & 0x000F000Fu;                // pairs n = 0, 1 in bits 0-3; 2, 3 in bits 16-19
  return (x | (x >> 12)) & 0xFFu;
}

// The thread's 16 columns of 64 consecutive keys (bit k of `keys` key k):
// bit 2 n + c is key 8 n + first_col + c.
SPATTN_HD uint32_t thread_columns(uint64_t keys, int first_col) {
  return quarter_columns(static_cast<uint32_t>(keys), first_col) |
         quarter_columns(static_cast<uint32_t>(keys >> 32), first_col) << 8;
}

// The term's allowed keys among the 64 keys from k0 (bit k: key k0 + k) for
// query row i at position p of query head h; false if the term has no span
// form.
SPATTN_HD bool term_row_word(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t k0, uint64_t& word) {
  using pattern_math::span_word;
  if (t.kind == TermKind::Custom) {
    word = terms::Custom::row_word(t, h, i, k0) & (t.causal ? span_word(k0, p, 1, 0, k0) : ~uint64_t{0});
    return true;
  }
  const int64_t a = clamp_param(t.a), b = clamp_param(t.b);
  int64_t lo1 = 0, hi1 = -1, stride1 = 1, residue1 = 0;
  int64_t lo2 = 0, hi2 = -1, stride2 = 1, residue2 = 0;
  switch (t.kind) {
    case TermKind::Dense: hi1 = kSpanInfinity; break;
    case TermKind::SlidingWindow: lo1 = p - a; hi1 = p + b; break;
    case TermKind::BlockDiagonal: lo1 = p - pattern_math::positive_mod(p, a); hi1 = lo1 + a - 1; break;
    case TermKind::Streaming: hi1 = a - 1; lo2 = p - b + 1; hi2 = kSpanInfinity; break;
    case TermKind::Strided:
      lo1 = p - a + 1;
      hi1 = kSpanInfinity;
      hi2 = kSpanInfinity;
      stride2 = a;
      residue2 = pattern_math::positive_mod(p, a);
      break;
    case TermKind::Dilated: {
      const int64_t hr = pattern_math::positive_mod(h, b);
      if (pattern_math::positive_mod(p, b) == hr) {
        lo1 = p - pattern_math::positive_mod(p, a);  // floor(p / a) * a
        hi1 = lo1 + a - 1;
        stride1 = b;
        residue1 = hr;
      }
      break;
    }
    default: return false;
  }
  if (t.causal) {
    hi1 = hi1 < p ? hi1 : p;
    hi2 = hi2 < p ? hi2 : p;
  }
  word = span_word(lo1, hi1, stride1, residue1, k0) | span_word(lo2, hi2, stride2, residue2, k0);
  return true;
}

// The expression's allowed keys among the 64 keys from k0 for query row i at
// position p (the call's coordinates, translated through the expression's
// frame) (OR or AND of its terms); false if some term has no span form. Term `skip_term` of an OR is
// left out (a dilated split's rest pass: its term's pairs in the row are all
// excluded anyway).
SPATTN_HD bool expr_row_word(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t k0, uint64_t& word,
                             int32_t skip_term = -1) {
  const PositionFrame& f = e.frame;
  p = framed_position(f, i, p);
  i = framed_row(f, i);
  k0 = framed_key(f, k0);
  const bool all = e.op == ExprOp::And;
  uint64_t acc = all ? ~uint64_t{0} : 0;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    if (n == skip_term && !all) continue;
    uint64_t term_word = 0;
    if (!term_row_word(e.terms[n], h, i, p, k0, term_word)) return false;
    acc = all ? acc & term_word : acc | term_word;
  }
  word = acc;
  return true;
}

}  // namespace spattn::cuda_detail
