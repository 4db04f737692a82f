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
// each (column k = 2n + c), and a row's keep bits are its columns' bits: bit
// k is column k (thread_columns in row_key_bits.hpp picks them out of a row's
// 64-key word). KeepBits packs the rows into 32-bit words, whole rows per
// word. The predicate itself runs once per row and 64-key segment, a lane
// each (computed_keep_bits), or a table made before the kernel holds them
// (keep_bits_table.cuh).
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
  // ORs `bits` (bit k: column k) into row r.
  __device__ __forceinline__ void add_row(int r, uint32_t bits) {
    const uint32_t placed = (bits & kRowMask) << ((r % kRowsPerWord) * kRowBits);
#pragma unroll
    for (int w = 0; w < kWords; ++w)
      if (w == r / kRowsPerWord) word[w] |= placed;
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

// Masks a tile's scores: `keep` where it drops something (partial tiles, a
// dilated split's exclusion), key bounds on a ragged full tile (the keys past
// k_len are zeros, or in a packed varlen batch the next sequence's).
template <typename Tr>
__device__ __forceinline__ void mask_scores(float (&s)[Tr::kMAtoms][Tr::kNAtoms][4], bool full,
                                            const KeepBits<Tr>& keep, int64_t k0, int64_t k_len, int lane) {
  if (!keep.keeps_all()) apply_keep_bits<Tr>(s, keep);
  if (full && k0 + Tr::kBlockN > k_len) mask_key_bounds<Tr>(s, k_len - k0, lane);
}

// The keys among `candidates` (bit k: key k0 + k) that the expression allows
// in query row i at position p, tested one by one: the patterns without a span
// form (fixed, BigBird, Longformer). Out of line: inlined, its copies in a
// unit's first tile and in the tile loop made more than a quarter of the
// D = 128 sm90 kernel's instructions, which only the partial tiles of such
// masks run.
inline __device__ __noinline__ uint64_t keys_allowed_one_by_one(const PatternExpr& expr, int64_t h, int64_t i,
                                                                int64_t p, int64_t k0, uint64_t candidates) {
  uint64_t word = 0;
  const int end = 64 - __clzll(static_cast<long long>(candidates));
#pragma unroll 1
  for (int k = 0; k < end; ++k)
    if (((candidates >> k) & 1) != 0 && expr_allows(expr, h, i, p, k0 + k)) word |= uint64_t{1} << k;
  return word;
}

// The keep bits of one row and 64-key segment of the tile, evaluated by one
// lane (computed_keep_bits): `slot` numbers the warp's (row, segment) pairs, rows
// first (row slot % kWarpRows of the warp, segment slot / kWarpRows). A partial
// tile's allowed pairs - key in bounds, the sub-block kept (derived plans), and
// either the sub-block full or the pattern predicate true, through its span
// form (row_key_bits.hpp) where the pattern has one, else key by key, for the
// keys of partial sub-blocks only - less the pairs a dilated split leaves to
// its other pass when `excluding`. All keys of a full tile (its key bounds are
// masked apart, mask_key_bounds); none for a row outside the sequence.
template <typename Tr>
__device__ __forceinline__ uint64_t lane_keep_word(const FwdParams& p, const PatternExpr& expr, const TileWalk& walk,
                                                   bool full, bool excluding, const SequenceSpan& seq, int64_t h,
                                                   int64_t q0, int64_t k0, int warp, int slot) {
  constexpr int kSegments = Tr::kBlockN / 64;
  const int kernel_row = warp * Tr::kWarpRows + slot % Tr::kWarpRows, segment = slot / Tr::kWarpRows % kSegments;
  const int64_t seg_k0 = k0 + 64 * segment;
  if (!seq.has_row(q0 + kernel_row)) return 0;
  // The mask's query row i and its row in the tile: the kernel's, but for
  // packed query heads (PackedHeads: one tile of positions x G rows, q0 = 0)
  // row r is the mask's row r / G. Query row i sits at position i + shift
  // (for a varlen sequence that is its mask row; a regular batch's mask rows
  // are its query rows).
  const int row = p.packed.mask_row(kernel_row);
  const int64_t i = q0 + row;
  const int64_t shift = seq.k_len - (p.packed.any() ? p.packed.mask_row(static_cast<int>(seq.q_len)) : seq.q_len);
  uint64_t word = ~uint64_t{0};
  if (!full) {
    const int64_t keys_left = seq.k_len - seg_k0;
    const int keys = keys_left >= 64 ? 64 : keys_left <= 0 ? 0 : static_cast<int>(keys_left);
    // The keys the predicate decides: all in bounds of a walked mask; only
    // the present keys of partial sub-blocks of a derived plan, whose full
    // ones are kept as they are (none is left to test for BigBird at mask
    // block 64, all of whose kept sub-blocks are full).
    uint64_t to_test = pattern_math::bit_run(0, keys - 1);
    word = 0;
    const DeviceTilePlanView& plan = p.plan;
    if (plan.sub_present != nullptr) {
      const int first = (row >> plan.sub.row_shift) * plan.sub.cols, shift_k = plan.sub.col_shift;
      const uint64_t present = plan.sub_present[walk.at] >> first, sub_full = plan.sub_full[walk.at] >> first;
      uint64_t present_keys = 0, full_keys = 0;
#pragma unroll 1
      for (int c = (64 * segment) >> shift_k; c <= (64 * segment + 63) >> shift_k; ++c) {
        const int lo = (c << shift_k) - 64 * segment, hi = ((c + 1) << shift_k) - 1 - 64 * segment;
        const uint64_t run = pattern_math::bit_run(lo < 0 ? 0 : lo, hi > 63 ? 63 : hi);
        if ((present >> c) & 1) present_keys |= run;
        if ((sub_full >> c) & 1) full_keys |= run;
      }
      word = to_test & present_keys & full_keys;
      to_test &= present_keys & ~full_keys;
    }
    if (to_test != 0) {
      const int64_t warp_pos = q0 + p.packed.mask_row(warp * Tr::kWarpRows) + shift;  // its first row's position
      uint64_t allowed;
      if (!expr_row_word(expr, h, i, i + shift, seg_k0, allowed,
                         p.exclude.term_left_out(warp_pos, warp_pos + Tr::kWarpRows)))
        allowed = keys_allowed_one_by_one(expr, h, i, i + shift, seg_k0, to_test);
      word |= allowed & to_test;
    }
  }
  if (excluding) {
    KeySpan excluded;
    if (excluded_keys(p.exclude, h, pattern_math::positive_mod(h, p.exclude.rate), i, shift, excluded))
      word &= ~pattern_math::span_word(excluded.lo, excluded.hi, excluded.stride, excluded.residue, seg_k0);
  }
  return word;
}

// Whether kernel rows [row0, row0 + rows) of the tile at `walk` hold a kept
// sub-block: always where the plan walks the mask itself; on a derived plan,
// where its present bits say so for the mask rows of those rows. A consumer
// warpgroup of the sm90 kernel skips the products of a tile where its rows
// hold none (BigBird's 64-row blocks on the 128-row tile).
__device__ __forceinline__ bool rows_hold_kept_blocks(const FwdParams& p, const TileWalk& walk, int row0, int rows) {
  const DeviceTilePlanView& plan = p.plan;
  if (plan.sub_present == nullptr) return true;
  const int first = (p.packed.mask_row(row0) >> plan.sub.row_shift) * plan.sub.cols;
  const int last = ((p.packed.mask_row(row0 + rows - 1) >> plan.sub.row_shift) + 1) * plan.sub.cols - 1;
  return (plan.sub_present[walk.at] & pattern_math::bit_run(first, last > 63 ? 63 : last)) != 0;
}

// `x`, as a value the compiler cannot see through: what is computed from it
// stays where it is used instead of being hoisted out of the tile loop.
__device__ __forceinline__ int opaque(int x) {
  int y;
  asm volatile("mov.b32 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

// Whether a kernel masks the tile (its keep bits are not all set): a partial
// tile, or any tile of a dilated split's permuted pass, whose exclusion
// reaches every tile.
__device__ __forceinline__ bool tile_is_masked(const FwdParams& p, bool full) {
  return !full || p.exclude.kind == Exclusion::FullRuns;
}

// The keep bits of a tile: all on a full tile without exclusion; else each lane
// evaluates one row and 64-key segment of its warp's rows (lane_keep_word:
// lanes ascend over the rows, then the segments; with fewer than 32 of them,
// the upper lanes repeat the lower ones; with 32 rows of two segments, as in
// the sm80 kernel's 128-key tile, a lane evaluates its row's two) and each thread gathers its rows'
// columns from the lanes holding them (two shuffles per row and segment), so
// the predicate runs once per row and segment rather than once in each of the
// four threads sharing a row (at D = 256, where the upper 16 lanes repeat the
// lower ones, a pattern without a span form tests up to 64 keys per lane one by
// one, against 32 per thread before). Exclusions of a dilated split: the rest's
// on partial tiles, the permuted pass's on every tile. The lane and warp
// indices pass through `opaque` first: hoisted out of the tile loop, the
// shuffle sources and row offsets derived from them stayed live through the
// full tiles too (9 more registers at the sm90 loop head; same-run H100 A/B:
// dense -1.7% on sm80, window and streaming without the 3% they gain
// otherwise).
template <typename Tr>
__device__ __forceinline__ KeepBits<Tr> computed_keep_bits(const FwdParams& p, const PatternExpr& expr,
                                                           const TileWalk& tile, bool full, const SequenceSpan& seq,
                                                           int64_t h, int64_t q0, int64_t k0, int warp, int lane) {
  constexpr int kSegments = Tr::kBlockN / 64;
  constexpr int kSlots = Tr::kWarpRows * kSegments;     // (row, segment) pairs of a warp
  constexpr int kPasses = kSlots > 32 ? kSegments : 1;  // of the warp's lanes over them
  static_assert(Tr::kBlockN % 64 == 0 && (kSlots <= 32 || Tr::kWarpRows == 32),
                "a lane per row and 64-key segment, or per row and all its segments");
  static_assert(KeepBits<Tr>::kRowBits == 16 * kSegments, "a thread has 16 columns per segment");
  if (!tile_is_masked(p, full)) return KeepBits<Tr>::all();
  const bool excluding = p.exclude.kind == Exclusion::FullRuns || (p.exclude.kind == Exclusion::Rest && !full);
  lane = opaque(lane);
  warp = opaque(warp);
  uint64_t word[kPasses];
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass)
    word[pass] = lane_keep_word<Tr>(p, expr, tile, full, excluding, seq, h, q0, k0, warp, lane + 32 * pass);
  const int first_col = (lane & 3) * 2;
  KeepBits<Tr> keep = KeepBits<Tr>::none();
#pragma unroll
  for (int r = 0; r < KeepBits<Tr>::kRows; ++r) {
    const int row = (r >> 1) * 16 + (lane >> 2) + (r & 1) * 8;  // of the warp
    uint32_t bits = 0;
#pragma unroll
    for (int segment = 0; segment < kSegments; ++segment) {
      // With one pass, slot row + segment * kWarpRows is lane; with one per segment, lane row of pass segment.
      const uint64_t keys = kPasses == 1 ? __shfl_sync(0xffffffffu, word[0], row + segment * Tr::kWarpRows)
                                         : __shfl_sync(0xffffffffu, word[segment], row);
      bits |= thread_columns(keys, first_col) << (16 * segment);
    }
    keep.add_row(r, bits);
  }
  return keep;
}

}  // namespace spattn::cuda_detail
