// cuda/common/tile_mask.cuh - which entries of a score tile a fused forward
// kernel keeps, as one bit per accumulator entry of a thread, shared by the
// sm80 (mma.sync) and sm90 (wgmma) kernels.
//
// Both kernels hold S in the m16n8 accumulator layout: per warp kMAtoms
// 16-row tiles of kNAtoms 8-key columns; thread (g = lane / 4, t = lane % 4)
// holds rows g and g + 8 and columns 2t, 2t + 1 of each. (A wgmma m64nN
// accumulator is exactly this layout for each of its four warps, with
// kMAtoms = 1 and kNAtoms = N / 8.) A thread thus has 2 * kMAtoms rows
// (row r = 2a + half: entries s[a][n][2 * half + c]) of 2 * kNAtoms columns
// each (column k = 2n + c), and a row's keep bits are its columns' bits as
// the span form computes them (row_key_bits.hpp): bit k is column k. KeepBits
// packs the rows into 32-bit words, whole rows per word.
//
// The traits Tr provide kMAtoms, kNAtoms, kWarpRows (query rows per warp) and
// kBlockN (keys per tile).
#pragma once

#include <cstdint>

#include "cuda/common/excluded_keys.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/row_key_bits.hpp"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_walk.cuh"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

constexpr float kNegInf = -__builtin_huge_valf();

// The keep bits of a thread's entries of one tile: row r's column k is bit
// (r % kRowsPerWord) * kRowBits + k of word r / kRowsPerWord.
template <typename Tr>
struct KeepBits {
  static constexpr int kRows = 2 * Tr::kMAtoms;
  static constexpr int kRowBits = 2 * Tr::kNAtoms;
  static_assert(kRowBits <= 32 && 32 % kRowBits == 0, "a thread's row fills a 32-bit word or divides it");
  static constexpr int kRowsPerWord = 32 / kRowBits;
  static constexpr int kWords = (kRows + kRowsPerWord - 1) / kRowsPerWord;
  static_assert(kRows % kRowsPerWord == 0, "the rows fill whole words");
  static constexpr uint32_t kRowMask = kRowBits == 32 ? ~0u : (1u << kRowBits) - 1u;
  uint32_t word[kWords];

  __device__ __forceinline__ static KeepBits all() {
    KeepBits k;
#pragma unroll
    for (int w = 0; w < kWords; ++w) k.word[w] = ~0u;
    return k;
  }
  __device__ __forceinline__ static KeepBits none() {
    KeepBits k;
#pragma unroll
    for (int w = 0; w < kWords; ++w) k.word[w] = 0;
    return k;
  }
  __device__ __forceinline__ bool keeps_all() const {
    bool all = true;
#pragma unroll
    for (int w = 0; w < kWords; ++w) all = all && word[w] == ~0u;
    return all;
  }
  // ORs `bits` (bit k: column k) into row r; r may vary at run time (the
  // rolled row loops), the words stay in registers.
  __device__ __forceinline__ void add_row(int r, uint32_t bits) {
    const uint32_t placed = (bits & kRowMask) << ((r % kRowsPerWord) * kRowBits);
#pragma unroll
    for (int w = 0; w < kWords; ++w)
      if (w == r / kRowsPerWord) word[w] |= placed;
  }
  __device__ __forceinline__ void remove(const KeepBits& other) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) word[w] &= ~other.word[w];
  }
  __device__ __forceinline__ bool keeps(int a, int half, int n, int c) const {
    const int r = 2 * a + half;
    return (word[r / kRowsPerWord] >> ((r % kRowsPerWord) * kRowBits + 2 * n + c)) & 1u;
  }
};

// Sets entries whose bit in `keep` is clear to -inf.
template <typename Tr>
__device__ __forceinline__ void apply_keep_bits(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], const KeepBits<Tr>& keep) {
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a)
#pragma unroll
    for (int n = 0; n < Tr::kNAtoms; ++n)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg)
        if (!keep.keeps(a, reg >> 1, n, reg & 1)) s[a][n][reg] = kNegInf;
}

// Key bounds only: entries with key >= k_len become -inf (full tiles at the end).
template <typename Tr>
__device__ __forceinline__ void mask_key_bounds(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], int64_t keys_left,
                                                int lane) {
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a)
#pragma unroll
    for (int n = 0; n < Tr::kNAtoms; ++n)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg)
        if (n * 8 + (lane & 3) * 2 + (reg & 1) >= keys_left) s[a][n][reg] = kNegInf;
}

// The pairs of a partial tile that are allowed: key and row in bounds, the
// sub-block kept (derived plans), and either the sub-block full or the pattern
// predicate true. The predicate is evaluated per row: through its span form
// (row_key_bits.hpp) where the pattern has one, else key by key. Rows are not
// unrolled: the predicate is large and stays out of the full-tile path.
template <typename Tr>
__device__ __forceinline__ KeepBits<Tr> partial_keep_bits(const FwdParams& p, const PatternExpr& expr,
                                                          const TileWalk& walk, const SequenceSpan& seq, int64_t h,
                                                          int64_t q0, int64_t k0, int warp, int lane) {
  constexpr int kCols = 2 * Tr::kNAtoms;  // columns of this thread per row
  const DeviceTilePlanView& plan = p.plan;
  const bool has_sub = plan.sub_present != nullptr;
  const uint64_t present = has_sub ? plan.sub_present[walk.at] : ~uint64_t{0};
  const uint64_t full = has_sub ? plan.sub_full[walk.at] : 0;
  // Query row i sits at position i + shift (for a varlen sequence that is its
  // mask row; a regular batch's mask rows are its query rows).
  const int64_t shift = seq.k_len - seq.q_len, keys_left = seq.k_len - k0;
  const int first_col = (lane & 3) * 2;
  // The thread's columns inside the keys: all but those at or past keys_left.
  const int k_end = keys_left >= Tr::kBlockN ? kCols : first_column_at_or_after(static_cast<int>(keys_left), first_col);
  const uint32_t in_bounds = k_end >= 32 ? ~0u : (1u << k_end) - 1u;
  const int64_t warp_pos = q0 + warp * Tr::kWarpRows + shift;
  const int32_t skip_term = p.exclude.term_left_out(warp_pos, warp_pos + Tr::kWarpRows);
  KeepBits<Tr> keep = KeepBits<Tr>::none();
#pragma unroll 1
  for (int r = 0; r < KeepBits<Tr>::kRows; ++r) {
    const int row = warp * Tr::kWarpRows + (r >> 1) * 16 + (lane >> 2) + (r & 1) * 8;
    const int64_t i = q0 + row;
    if (!seq.has_row(i)) continue;
    uint32_t allowed = 0;
    if (!expr_row_bits<Tr::kNAtoms>(expr, h, i + shift, k0, first_col, allowed, skip_term)) {
#pragma unroll 1
      for (int k = 0; k < k_end; ++k) {
        const int col = (k >> 1) * 8 + (k & 1) + first_col;
        if (expr_allows(expr, h, i, i + shift, k0 + col)) allowed |= 1u << k;
      }
    }
    allowed &= in_bounds;
    if (has_sub) {  // a derived plan: the sub-block must be present, and full or allowed
      uint32_t sub_ok = 0;
#pragma unroll
      for (int k = 0; k < kCols; ++k) {
        const int col = (k >> 1) * 8 + (k & 1) + first_col;
        const int bit = (row >> plan.sub.row_shift) * plan.sub.cols + (col >> plan.sub.col_shift);
        sub_ok |= static_cast<uint32_t>(((present >> bit) & 1) && (((full >> bit) & 1) || ((allowed >> k) & 1))) << k;
      }
      allowed = sub_ok & in_bounds;
    }
    keep.add_row(r, allowed);
  }
  return keep;
}

// The entries of the tile that p.exclude removes (the keys of each row from
// excluded_keys).
template <typename Tr>
__device__ __forceinline__ KeepBits<Tr> excluded_bits(const FwdParams& p, const SequenceSpan& seq, int64_t h,
                                                      int64_t q0, int64_t k0, int warp, int lane) {
  const int64_t residue = positive_mod(h, p.exclude.rate);
  const int first_col = (lane & 3) * 2;
  KeepBits<Tr> out = KeepBits<Tr>::none();
#pragma unroll 1
  for (int r = 0; r < KeepBits<Tr>::kRows; ++r) {
    const int64_t i = q0 + warp * Tr::kWarpRows + (r >> 1) * 16 + (lane >> 2) + (r & 1) * 8;
    KeySpan keys;
    if (!seq.has_row(i) || !excluded_keys(p.exclude, h, residue, i, seq.k_len - seq.q_len, keys)) continue;
    out.add_row(r, span_bits<Tr::kNAtoms>(keys.lo, keys.hi, keys.stride, keys.residue, k0, first_col));
  }
  return out;
}

}  // namespace spattn::cuda_detail
