// cuda/bwd_sm80/bwd_tile_mask.cuh - a thread's keep bits of a partial tile
// (the rule and the bit layout are bwd_tile_rule.hpp's: each lane evaluates
// the rows and keys the warp needs, shuffles carry them to the threads
// holding the entries) and the masking of a product with them.
//
// Dropped entries are set to 0 in P and in dS (zero_dropped), never to -inf
// before the exponential: a NaN LSE then spreads only to the pairs its row
// keeps, as on the host backends, and a dropped pair adds nothing even where
// dP is not finite.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/bwd_sm80/bwd_tile_rule.hpp"

namespace spattn::cuda_detail {

constexpr unsigned kFullWarp = 0xffffffffu;

// dK/dV kernel: product rows are the warp's keys, columns the tile's query rows.
template <typename Tr>
__device__ __forceinline__ uint32_t key_rows_keep(const BwdParams& p, const BwdPlanView& plan, const BwdTile& tile,
                                                  const PatternExpr* expr, int64_t h, int warp, int lane) {
  static_assert(Tr::kColAtoms == 8 && Tr::kTile == 64, "64 query columns: two rows per lane");
  const uint32_t low = key_rows_lane_word(p.shape, plan, tile, expr, h, warp, lane, 0);
  const uint32_t high = key_rows_lane_word(p.shape, plan, tile, expr, h, warp, lane, 1);
  return gather_key_rows_keep(
      [&](int second, int src) { return __shfl_sync(kFullWarp, second ? high : low, src); }, warp, lane);
}

// dQ kernel: product rows are the warp's query rows, columns the tile's keys.
template <typename Tr>
__device__ __forceinline__ uint32_t query_rows_keep(const BwdParams& p, const BwdPlanView& plan,
                                                    const BwdTile& tile, const PatternExpr* expr, int64_t h,
                                                    int warp, int lane) {
  static_assert(Tr::kColAtoms == 8 && Tr::kWarpRows == 16, "16 rows of 64 keys per warp");
  const uint32_t word = query_rows_lane_word(p.shape, plan, tile, expr, h, warp, lane);
  return gather_query_rows_keep([&](int src) { return __shfl_sync(kFullWarp, word, src); }, lane);
}

// Sets the entries whose keep bit is clear to 0: s holds columns from atom
// `first_atom` on (a part of the product's columns; keep_bit's layout puts a
// part's bits at the bottom of each row's 16 bits once shifted).
template <int kAtoms>
__device__ __forceinline__ void zero_dropped(float (&s)[kAtoms][4], uint32_t keep, int first_atom) {
  keep >>= 2 * first_atom;
#pragma unroll
  for (int n = 0; n < kAtoms; ++n)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (((keep >> keep_bit(n, r)) & 1u) == 0) s[n][r] = 0.0f;
}

}  // namespace spattn::cuda_detail
