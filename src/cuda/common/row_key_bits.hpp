// cuda/common/row_key_bits.hpp - the pattern predicate of one query row over a
// thread's columns of a key tile, as a bit mask, without testing key by key.
//
// In the mma C layout a thread owns, of every 8 consecutive keys of a tile,
// the pair first_col, first_col + 1: column k of the thread (k = 0 .. 2N-1) is
// key k0 + (k / 2) * 8 + (k % 2) + first_col. For the terms whose allowed keys
// in a row form up to two arithmetic spans {lo <= j <= hi, j = residue mod
// stride} - dense, sliding window, block-diagonal, streaming, strided,
// dilated - the row's spans are derived once from the term's definition in
// spattn/pattern_terms.hpp and turned into the thread's bits with a few
// compares per column. Other terms (fixed, BigBird, Longformer, custom) report
// that they have no span form, and the caller tests their keys one by one
// with expr_allows. Host and device (unit-tested on the host against
// term_allows).
#pragma once

#include <cstdint>

#include "spattn/hd.hpp"
#include "spattn/pattern_terms.hpp"

// Keeps a loop rolled under nvcc (host compilers have no such pragma).
#if defined(__CUDACC__)
#define SPATTN_ROLLED_LOOP _Pragma("unroll 1")
#else
#define SPATTN_ROLLED_LOOP
#endif

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

// Index of the first of the thread's columns at or after tile column x
// (columns are (k / 2) * 8 + (k % 2) + first_col).
SPATTN_HD int first_column_at_or_after(int x, int first_col) {
  if (x <= first_col) return 0;
  const unsigned d = static_cast<unsigned>(x - first_col), rem = d & 7u;  // d > 0: shifts and masks
  return static_cast<int>(2u * (d >> 3) + (rem < 2u ? rem : 2u));
}

// Bits k (k < 2 * kNAtoms) of the thread's columns whose key lies in
// [lo, hi] and is congruent to `residue` modulo `stride`.
template <int kNAtoms>
SPATTN_HD uint32_t span_bits(int64_t lo, int64_t hi, int64_t stride, int64_t residue, int64_t k0, int first_col) {
  constexpr int kTileKeys = kNAtoms * 8, kCols = 2 * kNAtoms;
  if (hi < lo || hi < k0 || lo >= k0 + kTileKeys) return 0;
  const int lo_rel = lo - k0 < 0 ? 0 : static_cast<int>(lo - k0);
  const int hi_rel = hi - k0 >= kTileKeys ? kTileKeys - 1 : static_cast<int>(hi - k0);
  // Columns k in [k_lo, k_hi): a contiguous run, since columns grow with k.
  const int k_lo = first_column_at_or_after(lo_rel, first_col);
  const int k_hi = first_column_at_or_after(hi_rel + 1, first_col);
  if (k_hi <= k_lo) return 0;
  const uint32_t run = ((k_hi >= 32 ? 0u : 1u << k_hi) - 1u) & ~((1u << k_lo) - 1u);
  if (stride <= 1) return run & ((kCols >= 32 ? 0u : 1u << kCols) - 1u);
  if (stride > kTileKeys) {  // at most one key of the tile qualifies
    const int64_t offset = positive_mod(residue - k0, stride);
    if (offset >= kTileKeys) return 0;
    return run & (((offset - first_col) & 7) < 2 ? 1u << first_column_at_or_after(static_cast<int>(offset), first_col)
                                                 : 0u);
  }
  // Column k is kept when (k / 2) * 8 + (k % 2) + base is a multiple of stride.
  const int m = static_cast<int>(stride);
  const int base = static_cast<int>(positive_mod(k0 + first_col - residue, stride));
  if (m <= 8 && is_power_of_two(m)) {  // (k / 2) * 8 is a multiple of m: only k % 2 + base (< m) decides
    const uint32_t even = base == 0 ? 0x55555555u : 0u;
    const uint32_t odd = base + 1 == m ? 0xAAAAAAAAu : 0u;
    return run & (even | odd);
  }
  uint32_t bits = 0;
  SPATTN_ROLLED_LOOP
  for (int k = k_lo; k < k_hi; ++k) {
    const int x = (k >> 1) * 8 + (k & 1) + base;
    if (is_power_of_two(m) ? (x & (m - 1)) == 0 : x % m == 0) bits |= 1u << k;
  }
  return bits;
}

// The term's allowed keys among the thread's columns for the row at position
// p of query head h; false if the term has no span form.
template <int kNAtoms>
SPATTN_HD bool term_row_bits(const PatternTerm& t, int64_t h, int64_t p, int64_t k0, int first_col,
                             uint32_t& bits) {
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
  bits = span_bits<kNAtoms>(lo1, hi1, stride1, residue1, k0, first_col) |
         span_bits<kNAtoms>(lo2, hi2, stride2, residue2, k0, first_col);
  return true;
}

// The expression's allowed keys among the thread's columns (OR or AND of its
// terms); false if some term has no span form. Term `skip_term` of an OR is
// left out (a dilated split's rest pass: its term's pairs in the row are all
// excluded anyway).
template <int kNAtoms>
SPATTN_HD bool expr_row_bits(const PatternExpr& e, int64_t h, int64_t p, int64_t k0, int first_col,
                             uint32_t& bits, int32_t skip_term = -1) {
  const bool all = e.op == ExprOp::And;
  uint32_t acc = all ? (2u << (2 * kNAtoms - 1)) - 1u : 0u;
  for (int32_t n = 0; n < e.num_terms; ++n) {
    if (n == skip_term && !all) continue;
    uint32_t term_bits = 0;
    if (!term_row_bits<kNAtoms>(e.terms[n], h, p, k0, first_col, term_bits)) return false;
    acc = all ? acc & term_bits : acc | term_bits;
  }
  bits = acc;
  return true;
}

}  // namespace spattn::cuda_detail
