// cuda/common/row_key_bits.hpp - the pattern predicate of one query row over
// 64 consecutive keys, as a 64-bit word (bit k: key k0 + k), without testing
// key by key, and a thread's columns of such a word in the mma C layout.
//
// For the terms whose allowed keys in a row form up to two arithmetic spans
// {lo <= j <= hi, j = residue mod stride} - dense, sliding window,
// block-diagonal, streaming, strided, dilated - the row's spans are derived
// once from the term's definition in spattn/pattern_terms.hpp and turned into
// the word with a few shifts and masks. A custom block mask's row is the
// union of its kept blocks among the segment's (a walk over the row's sorted
// block columns; at most 64 / block_k + 2 of them). Other terms (fixed,
// BigBird, Longformer) report that they have no span form, and the caller
// tests their keys one by one with expr_allows. In the mma C layout a thread
// owns, of every 8 consecutive keys of a tile, the pair first_col,
// first_col + 1 (thread_columns picks them out of a word). Host and device
// (unit-tested on the host against expr_allows).
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

// Bound for spans open on one side; term parameters are clamped to it first, so
// no sum below overflows.
constexpr int64_t kSpanInfinity = int64_t{1} << 50;

SPATTN_HD int64_t clamp_param(int64_t x) { return x < kSpanInfinity ? x : kSpanInfinity; }

SPATTN_HD bool fits_int32(int64_t x) { return x >= -2147483647 && x <= 2147483647; }

SPATTN_HD bool is_power_of_two(int64_t m) { return (m & (m - 1)) == 0; }

// log2 of a power of two.
SPATTN_HD int log2_of_power_of_two(int64_t m) {
#if defined(__CUDA_ARCH__)
  return __ffsll(m) - 1;
#else
  return __builtin_ctzll(static_cast<unsigned long long>(m));
#endif
}

// x mod m in [0, m) for m > 0. Division is a long instruction sequence on the
// GPU (a subroutine in 64 bits), and partial tiles evaluate several per row:
// a mask when m is a power of two (two's complement gives the residue of a
// negative x too), else 32-bit arithmetic when both fit.
SPATTN_HD int64_t positive_mod(int64_t x, int64_t m) {
  if (is_power_of_two(m)) return x & (m - 1);
  if (fits_int32(x) && fits_int32(m)) {
    const int32_t r = static_cast<int32_t>(x) % static_cast<int32_t>(m);
    return r < 0 ? r + m : r;
  }
  const int64_t r = x % m;
  return r < 0 ? r + m : r;
}

// x / m for x >= 0 and m > 0, cheap in the same ways as positive_mod.
SPATTN_HD int64_t nonnegative_div(int64_t x, int64_t m) {
  if (is_power_of_two(m)) return x >> log2_of_power_of_two(m);
  if (fits_int32(x) && fits_int32(m)) return static_cast<int32_t>(x) / static_cast<int32_t>(m);
  return x / m;
}

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

// The keys among the 64 from k0 that the custom blocks of query row i (on the
// (i, j) grid) keep for mask head h.
SPATTN_HD uint64_t custom_row_word(const PatternTerm& t, int64_t h, int64_t i, int64_t k0) {
  const int64_t r = (t.table_heads == 1 ? 0 : h) * t.table_rows + i / t.a;
  const int32_t* columns = t.indices + t.offsets[r];
  const int64_t n = t.offsets[r + 1] - t.offsets[r], last = (k0 + 63) / t.b;
  uint64_t word = 0;
  for (int64_t at = pattern_math::lower_bound(columns, n, k0 / t.b); at < n && columns[at] <= last; ++at)
    word |= span_word(columns[at] * t.b, columns[at] * t.b + t.b - 1, 1, 0, k0);
  return word;
}

// The term's allowed keys among the 64 keys from k0 (bit k: key k0 + k) for
// query row i at position p of query head h; false if the term has no span
// form.
SPATTN_HD bool term_row_word(const PatternTerm& t, int64_t h, int64_t i, int64_t p, int64_t k0, uint64_t& word) {
  if (t.kind == TermKind::Custom) {
    word = custom_row_word(t, h, i, k0) & (t.causal ? span_word(k0, p, 1, 0, k0) : ~uint64_t{0});
    return true;
  }
  const int64_t a = clamp_param(t.a), b = clamp_param(t.b);
  int64_t lo1 = 0, hi1 = -1, stride1 = 1, residue1 = 0;
  int64_t lo2 = 0, hi2 = -1, stride2 = 1, residue2 = 0;
  switch (t.kind) {
    case TermKind::Dense: hi1 = kSpanInfinity; break;
    case TermKind::SlidingWindow: lo1 = p - a; hi1 = p + b; break;
    case TermKind::BlockDiagonal: lo1 = p - positive_mod(p, a); hi1 = lo1 + a - 1; break;
    case TermKind::Streaming: hi1 = a - 1; lo2 = p - b + 1; hi2 = kSpanInfinity; break;
    case TermKind::Strided:
      lo1 = p - a + 1;
      hi1 = kSpanInfinity;
      hi2 = kSpanInfinity;
      stride2 = a;
      residue2 = positive_mod(p, a);
      break;
    case TermKind::Dilated: {
      const int64_t hr = positive_mod(h, b);
      if (positive_mod(p, b) == hr) {
        lo1 = p - positive_mod(p, a);  // floor(p / a) * a
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
// position p (OR or AND of its terms); false if some term has no span form. Term `skip_term` of an OR is
// left out (a dilated split's rest pass: its term's pairs in the row are all
// excluded anyway).
SPATTN_HD bool expr_row_word(const PatternExpr& e, int64_t h, int64_t i, int64_t p, int64_t k0, uint64_t& word,
                             int32_t skip_term = -1) {
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
