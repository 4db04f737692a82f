// cuda/common/tile_mask.cuh - which entries of a score tile a fused forward
// kernel keeps, as one bit per accumulator entry of a thread, shared by the
// sm80 (mma.sync) and sm90 (wgmma) kernels.
//
// Both kernels hold S in the m16n8 accumulator layout: per warp kMAtoms
// 16-row tiles of kNAtoms 8-key columns; thread (g = lane / 4, t = lane % 4)
// holds rows g and g + 8 and columns 2t, 2t + 1 of each. (A wgmma m64nN
// accumulator is exactly this layout for each of its four warps, with
// kMAtoms = 1 and kNAtoms = N / 8.) Bit (a * kNAtoms + n) * 4 + reg of a keep
// word is entry s[a][n][reg].
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

// Sets entries whose bit in `keep` is clear to -inf.
template <typename Tr>
__device__ __forceinline__ void apply_keep_bits(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], uint64_t keep) {
#pragma unroll
  for (int a = 0; a < Tr::kMAtoms; ++a)
#pragma unroll
    for (int n = 0; n < Tr::kNAtoms; ++n)
#pragma unroll
      for (int reg = 0; reg < 4; ++reg)
        if (!((keep >> ((a * Tr::kNAtoms + n) * 4 + reg)) & 1)) s[a][n][reg] = kNegInf;
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
// (row_key_bits.hpp) where the pattern has one, else key by key. Bit
// (a * kNAtoms + n) * 4 + reg of the result is entry s[a][n][reg]. Rows are not
// unrolled: the predicate is large and stays out of the full-tile path.
template <typename Tr>
__device__ __forceinline__ uint64_t partial_keep_bits(const FwdParams& p, const PatternExpr& expr,
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
  const int64_t warp_pos = q0 + warp * Tr::kWarpRows + shift;
  const int32_t skip_term = p.exclude.term_left_out(warp_pos, warp_pos + Tr::kWarpRows);
  uint64_t keep = 0;
#pragma unroll 1
  for (int rr = 0; rr < 2 * Tr::kMAtoms; ++rr) {
    const int a = rr >> 1, half = rr & 1;
    const int row = warp * Tr::kWarpRows + a * 16 + (lane >> 2) + half * 8;
    const int64_t i = q0 + row;
    if (!seq.has_row(i)) continue;
    uint32_t allowed = 0;
    if (!expr_row_bits<Tr::kNAtoms>(expr, h, i + shift, k0, first_col, allowed, skip_term)) {
#pragma unroll 1
      for (int k = 0; k < kCols; ++k) {
        const int col = (k >> 1) * 8 + (k & 1) + first_col;
        if (col < keys_left && expr_allows(expr, h, i, i + shift, k0 + col)) allowed |= 1u << k;
      }
    }
    const int shift_out = a * Tr::kNAtoms * 4 + half * 2;
    if (!has_sub) {  // the mask's own blocks: the predicate and the key bounds decide
      const int k_end =
          keys_left >= Tr::kBlockN ? kCols : first_column_at_or_after(static_cast<int>(keys_left), first_col);
      allowed &= k_end >= 32 ? ~0u : (1u << k_end) - 1u;
      uint64_t spread = 0;  // column pair n (bits 2n, 2n+1) -> entries s[a][n][2 * half + c]
#pragma unroll
      for (int n = 0; n < Tr::kNAtoms; ++n) spread |= static_cast<uint64_t>((allowed >> (2 * n)) & 3u) << (4 * n);
      keep |= spread << shift_out;
      continue;
    }
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int col = (k >> 1) * 8 + (k & 1) + first_col;
      const int bit = (row >> plan.sub.row_shift) * plan.sub.cols + (col >> plan.sub.col_shift);
      const bool ok = col < keys_left && ((present >> bit) & 1) && (((full >> bit) & 1) || ((allowed >> k) & 1));
      keep |= static_cast<uint64_t>(ok) << (shift_out + (k >> 1) * 4 + (k & 1));
    }
  }
  return keep;
}

// Spreads a row's column bits (bit k = column k of the thread) to entries
// s[a][n][2 * half + c] of the keep-bit layout.
template <typename Tr>
__device__ __forceinline__ uint64_t spread_row_bits(uint32_t bits, int a, int half) {
  uint64_t spread = 0;
#pragma unroll
  for (int n = 0; n < Tr::kNAtoms; ++n) spread |= static_cast<uint64_t>((bits >> (2 * n)) & 3u) << (4 * n);
  return spread << (a * Tr::kNAtoms * 4 + half * 2);
}

// The entries of the tile that p.exclude removes (same bit order as
// partial_keep_bits; the keys of each row from excluded_keys).
template <typename Tr>
__device__ __forceinline__ uint64_t excluded_bits(const FwdParams& p, const SequenceSpan& seq, int64_t h, int64_t q0,
                                                  int64_t k0, int warp, int lane) {
  const int64_t residue = positive_mod(h, p.exclude.rate);
  const int first_col = (lane & 3) * 2;
  uint64_t out = 0;
#pragma unroll 1
  for (int rr = 0; rr < 2 * Tr::kMAtoms; ++rr) {
    const int a = rr >> 1, half = rr & 1;
    const int64_t i = q0 + warp * Tr::kWarpRows + a * 16 + (lane >> 2) + half * 8;
    KeySpan keys;
    if (!seq.has_row(i) || !excluded_keys(p.exclude, h, residue, i, seq.k_len - seq.q_len, keys)) continue;
    out |= spread_row_bits<Tr>(span_bits<Tr::kNAtoms>(keys.lo, keys.hi, keys.stride, keys.residue, k0, first_col),
                               a, half);
  }
  return out;
}

}  // namespace spattn::cuda_detail
