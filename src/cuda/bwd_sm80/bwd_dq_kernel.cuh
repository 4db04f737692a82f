// cuda/bwd_sm80/bwd_dq_kernel.cuh - the dQ kernel of the backward pass (sm80
// and newer, mma.sync): one CTA per (batch, query head, query tile).
//
// The CTA keeps its 64 rows of Q and d_out in shared memory, and each thread
// its two rows' LSE (log2) and delta in registers, and walks the key tiles
// of its row (RowWalk: the forward's lists, ascending). Per key tile, with K
// and V double-buffered (the next tile's copies start right after the
// step's one barrier):
//   S   = Q K^T                           (16 rows x 64 keys per warp)
//   P   = exp2(S * scale * log2(e) - lse_log2)   dropped pairs -> 0
//   dP  = dO V^T
//   dS  = P * (dP - delta)                dropped pairs -> 0
//   dQ += dS K                            (dS straight from registers)
// Full tiles inside the keys are not masked at all; the last key tile drops
// its keys past the keys; partial tiles apply the sub-block bits and the
// pattern predicate (bwd_tile_mask.cuh). Then dQ * scale is written once, in
// the gradients' dtype (rows past q_len are not written; a row without key
// tiles writes zeros).
//
// Per warp the accumulator dQ (16 rows x D) and S, dP (16 x 64) live in
// registers in the mma C layout (bwd_products.cuh): thread (g = lane / 4,
// t = lane % 4) holds rows 16 w + g and 16 w + g + 8, and columns 2t, 2t + 1
// of each 8-column atom.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/bwd_sm80/bwd_products.cuh"
#include "cuda/bwd_sm80/bwd_tile_io.cuh"
#include "cuda/bwd_sm80/bwd_tile_mask.cuh"
#include "cuda/bwd_sm80/bwd_traits.cuh"
#include "cuda/bwd_sm80/bwd_walk.hpp"
#include "cuda/common/ptx_sm80.cuh"

namespace spattn::cuda_detail {

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinBlocksPerSm)
    bwd_dq_kernel(const BwdParams p, const BwdPlanView plan) {
  using T = typename Tr::T;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sQ = smem_address(smem);
  const uint32_t sDOut = sQ + Tr::kTileBytes;
  const uint32_t sK0 = sQ + Tr::kDqKOffset;  // stage s at + s * kTileBytes
  const uint32_t sV0 = sQ + Tr::kDqVOffset;  // likewise
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  // ---- the CTA's query tile: query tiles fastest, in the plan's order, then query heads, then batch ----
  const BwdShape& shape = p.shape;
  const int64_t cta = blockIdx.x;
  const int64_t qt = plan.q_tile_order[cta % plan.num_q_tiles];
  const int64_t h = cta / plan.num_q_tiles % shape.q_heads;
  const int64_t b = cta / (plan.num_q_tiles * shape.q_heads);
  const int64_t q0 = qt * Tr::kTile;
  const int64_t kv_head = h / shape.group();

  const T* q = static_cast<const T*>(p.q.data) + p.q.row_offset(b, h, 0);
  const T* d_out = static_cast<const T*>(p.d_out.data) + p.d_out.row_offset(b, h, 0);
  const T* k = static_cast<const T*>(p.k.data) + p.k.row_offset(b, kv_head, 0);
  const T* v = static_cast<const T*>(p.v.data) + p.v.row_offset(b, kv_head, 0);
  load_tile_rows<Tr>(sQ, q, p.q.stride_l, q0, shape.q_len);
  load_tile_rows<Tr>(sDOut, d_out, p.d_out.stride_l, q0, shape.q_len);

  // K and V of the walk's tile into `stage`.
  const auto load_key_side = [&](const RowWalk& w, int stage) {
    const int64_t key0 = w.k_tile(plan) * Tr::kTile;
    load_tile_rows<Tr>(sK0 + stage * Tr::kTileBytes, k, p.k.stride_l, key0, shape.k_len);
    load_tile_rows<Tr>(sV0 + stage * Tr::kTileBytes, v, p.v.stride_l, key0, shape.k_len);
  };

  const auto head = static_cast<int32_t>(h);
  const PatternExpr* expr = plan.expr_of(head, plan.heads_per_expr(shape.q_heads));
  RowWalk walk = RowWalk::start(plan, head / plan.heads_per_mask_head(shape.q_heads), qt);
  bool has_tile = walk.valid(plan);
  if (has_tile) load_key_side(walk, 0);
  cp_async_commit();

  // The thread's two rows' statistics (the scratch is padded: rows past q_len read +inf and 0).
  const int64_t row = q0 + warp * Tr::kWarpRows + lane / 4;
  const int64_t stat = p.stats.row(b, h, shape.q_heads, row);
  const float lse_log2[2] = {p.stats.lse_log2[stat], p.stats.lse_log2[stat + 8]};
  const float delta[2] = {p.stats.delta[stat], p.stats.delta[stat + 8]};

  float dq[Tr::kDAtoms][4];
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dq[d][c] = 0.0f;

  int stage = 0;
  while (has_tile) {
    const BwdTile tile = walk.tile(plan, qt);
    RowWalk next = walk;
    next.advance(plan);
    has_tile = next.valid(plan);
    cp_async_wait<0>();
    __syncthreads();  // this stage (and Q, d_out) visible to all; every warp done with the other stage
    if (has_tile) load_key_side(next, stage ^ 1);
    cp_async_commit();

    // The predicate runs before S is live, so that its registers do not compete with S.
    const int64_t keys_left = shape.k_len - tile.k0;
    const bool masked = !tile.full || keys_left < Tr::kTile;
    const uint32_t keep = !tile.full ? query_rows_keep<Tr>(p, plan, tile, expr, h, warp, lane)
                          : masked   ? columns_below(keys_left, lane)
                                     : ~0u;
    const uint32_t sK = sK0 + stage * Tr::kTileBytes, sV = sV0 + stage * Tr::kTileBytes;

    float s[Tr::kColAtoms][4];
#pragma unroll
    for (int n = 0; n < Tr::kColAtoms; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[n][c] = 0.0f;
    multiply_rows_by_rows<Tr, Tr::kColAtoms>(s, sQ, warp * Tr::kWarpRows, sK, lane);
#pragma unroll
    for (int n = 0; n < Tr::kColAtoms; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) s[n][c] = fast_exp2(fmaf(s[n][c], p.scale_log2, -lse_log2[c >> 1]));
    if (masked) zero_dropped(s, keep, 0);

    float dp[Tr::kColAtoms][4];
#pragma unroll
    for (int n = 0; n < Tr::kColAtoms; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) dp[n][c] = 0.0f;
    multiply_rows_by_rows<Tr, Tr::kColAtoms>(dp, sDOut, warp * Tr::kWarpRows, sV, lane);
#pragma unroll
    for (int n = 0; n < Tr::kColAtoms; ++n)
#pragma unroll
      for (int c = 0; c < 4; ++c) dp[n][c] = s[n][c] * (dp[n][c] - delta[c >> 1]);
    if (masked) zero_dropped(dp, keep, 0);
    multiply_weights_by_rows<Tr, Tr::kColAtoms>(dq, dp, sK, lane);

    stage ^= 1;
    walk = next;
  }
  cp_async_wait<0>();  // a row without key tiles still has its Q and d_out copies in flight

  store_gradient_rows<Tr>(p.dq, p.grads_f32, b, h, q0, shape.q_len, dq, p.scale, warp, lane);
}

}  // namespace spattn::cuda_detail
