// cuda/bwd_sm80/bwd_dkdv_kernel.cuh - the dK/dV kernel of the backward pass
// (sm80 and newer, mma.sync): one CTA per (batch, kv head, key tile).
//
// The CTA keeps its 64 keys of K and V in shared memory and walks, for each
// query head of its kv head, the query tiles that keep its key tile
// (ColumnWalk: the plan's key-major lists, a fixed order). Per query tile,
// with Q, d_out and the rows' LSE (log2) and delta double-buffered (the next
// tile's copies start right after the step's one barrier), and the tile's
// queries in kDkvParts parts (bwd_traits.cuh):
//   S^T  = K Q^T                          (16 keys x 64 queries per warp)
//   P^T  = exp2(S^T * scale * log2(e) - lse_log2)   dropped pairs -> 0
//   dV  += P^T dO                         (P^T straight from registers)
//   dP^T = V dO^T
//   dS^T = P^T * (dP^T - delta)           dropped pairs -> 0
//   dK  += dS^T Q
// Full tiles inside the queries are not masked at all; the last query tile
// drops its rows past the queries; partial tiles apply the sub-block bits
// and the pattern predicate (bwd_tile_mask.cuh). Then dK * scale and dV are
// written once, in the gradients' dtype (keys past k_len are not written; a
// key tile no query tile keeps writes zeros). No other CTA writes them: the
// sums over query heads (GQA) and query tiles are taken here, in the walk's
// order.
//
// Per warp the accumulators dK and dV (16 keys x D) and S^T, dP^T (16 x 64)
// live in registers in the mma C layout (bwd_products.cuh): thread
// (g = lane / 4, t = lane % 4) holds keys 16 w + g and 16 w + g + 8, and
// columns 2t, 2t + 1 of each 8-column atom.
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
    bwd_dkdv_kernel(const BwdParams p, const BwdPlanView plan) {
  using T = typename Tr::T;
  extern __shared__ __align__(16) unsigned char smem[];
  const uint32_t sK = smem_address(smem);
  const uint32_t sV = sK + Tr::kTileBytes;
  const uint32_t sQ0 = sK + Tr::kDkvQOffset;        // stage s at + s * kTileBytes
  const uint32_t sDOut0 = sK + Tr::kDkvDOutOffset;  // likewise
  const uint32_t sStats0 = sK + Tr::kDkvStatOffset;  // stage s at + s * kStatFloats floats
  const float* stats0 = reinterpret_cast<const float*>(smem + Tr::kDkvStatOffset);
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;

  // ---- the CTA's key tile: key tiles fastest, in the plan's order, then kv heads, then batch ----
  const BwdShape& shape = p.shape;
  const int64_t cta = blockIdx.x;
  const int64_t kt = plan.k_tile_order[cta % plan.num_k_tiles];
  const int64_t kv_head = cta / plan.num_k_tiles % shape.kv_heads;
  const int64_t b = cta / (plan.num_k_tiles * shape.kv_heads);
  const int64_t k0 = kt * Tr::kTile;

  const T* k = static_cast<const T*>(p.k.data) + p.k.row_offset(b, kv_head, 0);
  const T* v = static_cast<const T*>(p.v.data) + p.v.row_offset(b, kv_head, 0);
  load_tile_rows<Tr>(sK, k, p.k.stride_l, k0, shape.k_len);
  load_tile_rows<Tr>(sV, v, p.v.stride_l, k0, shape.k_len);

  // Q, d_out and the row statistics of the walk's tile into `stage`.
  const auto load_query_side = [&](const ColumnWalk& w, int stage) {
    const int64_t h = w.h, q0 = w.q_tile(plan) * Tr::kTile;
    const T* q = static_cast<const T*>(p.q.data) + p.q.row_offset(b, h, 0);
    const T* d_out = static_cast<const T*>(p.d_out.data) + p.d_out.row_offset(b, h, 0);
    load_tile_rows<Tr>(sQ0 + stage * Tr::kTileBytes, q, p.q.stride_l, q0, shape.q_len);
    load_tile_rows<Tr>(sDOut0 + stage * Tr::kTileBytes, d_out, p.d_out.stride_l, q0, shape.q_len);
    load_tile_stats<Tr>(sStats0 + stage * Tr::kStatFloats * 4, p.stats, p.stats.row(b, h, shape.q_heads, q0));
  };

  const int32_t per_mask_head = plan.heads_per_mask_head(shape.q_heads);
  const int32_t per_expr = plan.heads_per_expr(shape.q_heads);
  const auto group = static_cast<int32_t>(shape.group());
  const auto first_head = static_cast<int32_t>(kv_head) * group;
  ColumnWalk walk = ColumnWalk::start(plan, per_mask_head, first_head, first_head + group, kt);
  if (walk.valid()) load_query_side(walk, 0);
  cp_async_commit();

  float dk[Tr::kDAtoms][4], dv[Tr::kDAtoms][4];
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) dk[d][c] = dv[d][c] = 0.0f;

  const int col = 2 * (lane % 4);  // the thread's first column of each 8-column atom
  int stage = 0;
  while (walk.valid()) {
    const int32_t h = walk.h;
    const BwdTile tile = walk.tile(plan, kt);
    ColumnWalk next = walk;
    next.advance(plan, per_mask_head);
    cp_async_wait<0>();
    __syncthreads();  // this stage visible to all; every warp done with the other one
    if (next.valid()) load_query_side(next, stage ^ 1);
    cp_async_commit();

    // The predicate runs before S is live, so that its registers do not compete with S.
    const int64_t rows_left = shape.q_len - tile.q0;
    const bool masked = !tile.full || rows_left < Tr::kTile;
    const uint32_t keep = !tile.full ? key_rows_keep<Tr>(p, plan, tile, plan.expr_of(h, per_expr), h, warp, lane)
                          : masked   ? columns_below(rows_left, lane)
                                     : ~0u;
    const uint32_t sQ = sQ0 + stage * Tr::kTileBytes, sDOut = sDOut0 + stage * Tr::kTileBytes;
    const float* lse_log2 = stats0 + stage * Tr::kStatFloats;
    const float* delta = lse_log2 + Tr::kTile;

#pragma unroll
    for (int part = 0; part < Tr::kDkvParts; ++part) {
      constexpr int kAtoms = Tr::kDkvPartAtoms;
      const int first_atom = part * kAtoms;
      const uint32_t part_rows = first_atom * 8 * BwdFragStep<Tr>::kRowBytes;  // the part's first query row
      float s[kAtoms][4];
#pragma unroll
      for (int n = 0; n < kAtoms; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) s[n][c] = 0.0f;
      multiply_rows_by_rows<Tr, kAtoms>(s, sK, warp * Tr::kWarpRows, sQ + part_rows, lane);
#pragma unroll
      for (int n = 0; n < kAtoms; ++n) {
        const float2 l = *reinterpret_cast<const float2*>(lse_log2 + 8 * (first_atom + n) + col);
        s[n][0] = fast_exp2(fmaf(s[n][0], p.scale_log2, -l.x));
        s[n][1] = fast_exp2(fmaf(s[n][1], p.scale_log2, -l.y));
        s[n][2] = fast_exp2(fmaf(s[n][2], p.scale_log2, -l.x));
        s[n][3] = fast_exp2(fmaf(s[n][3], p.scale_log2, -l.y));
      }
      if (masked) zero_dropped(s, keep, first_atom);
      multiply_weights_by_rows<Tr, kAtoms>(dv, s, sDOut + part_rows, lane);

      float dp[kAtoms][4];
#pragma unroll
      for (int n = 0; n < kAtoms; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) dp[n][c] = 0.0f;
      multiply_rows_by_rows<Tr, kAtoms>(dp, sV, warp * Tr::kWarpRows, sDOut + part_rows, lane);
#pragma unroll
      for (int n = 0; n < kAtoms; ++n) {
        const float2 d = *reinterpret_cast<const float2*>(delta + 8 * (first_atom + n) + col);
        dp[n][0] = s[n][0] * (dp[n][0] - d.x);
        dp[n][1] = s[n][1] * (dp[n][1] - d.y);
        dp[n][2] = s[n][2] * (dp[n][2] - d.x);
        dp[n][3] = s[n][3] * (dp[n][3] - d.y);
      }
      if (masked) zero_dropped(dp, keep, first_atom);
      multiply_weights_by_rows<Tr, kAtoms>(dk, dp, sQ + part_rows, lane);
    }

    stage ^= 1;
    walk = next;
  }
  cp_async_wait<0>();  // a key tile that no query tile keeps still has its K and V copies in flight

  store_gradient_rows<Tr>(p.dk, p.grads_f32, b, kv_head, k0, shape.k_len, dk, p.scale, warp, lane);
  store_gradient_rows<Tr>(p.dv, p.grads_f32, b, kv_head, k0, shape.k_len, dv, 1.0f, warp, lane);
}

}  // namespace spattn::cuda_detail
