// cuda/plan/device_mask_walk.hpp - the per-lane walk of the device mask
// builder (device_mask_build.cu), plain host/device C++ so that the CPU tests
// can run it lane by lane too.
//
// Each (mask head, query block) row is cut into lanes: contiguous chunks of
// `blocks_per_lane` key blocks, one thread each (lanes_for_grid picks the
// size). A lane walks its chunk as the host builder walks a candidate range:
// a range the closed forms call empty is skipped, one they call full is kept
// whole, any other is halved, down to single blocks classified exactly
// (closed form, else row by row), all with the classification code of
// pattern/block_classify.hpp. Depth-first, left half first, so the blocks
// come out in key order, and the lanes of a row in lane order make the row.
#pragma once

#include <cstdint>

#include "pattern/block_classify.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

constexpr int kStackDepth = 40;  // pending ranges of one lane; log2(2^31) + 2 suffice

// Lanes are at least this long (shorter ones cost more in their own range
// classification and scan slot than they save) ...
constexpr int64_t kMinBlocksPerLane = 4;
// ... and longer where needed to keep the lane count (the scan's length and
// 16 bytes of scratch per lane) near this.
constexpr int64_t kTargetLanes = int64_t{1} << 22;

// Everything a lane needs to know about the grid of blocks.
struct RowGrid {
  const PatternExpr* exprs = nullptr;  // where the walk runs (device or host)
  int64_t num_exprs = 1;
  int64_t query_heads = 1;  // MaskShape::num_heads
  int64_t rows = 0;         // mask heads * query blocks
  int64_t num_q_blocks = 0, num_k_blocks = 0;
  int64_t q_len = 0, k_len = 0, block_q = 0, block_k = 0;
  int64_t offset = 0;  // k_len - q_len: the position of query row i is i + offset
  int64_t blocks_per_lane = 1, lanes_per_row = 1;
};

// Cuts every row of `g` (rows and num_k_blocks set) into lanes of
// `blocks_per_lane` key blocks.
inline void set_lanes(RowGrid& g, int64_t blocks_per_lane) {
  g.blocks_per_lane = blocks_per_lane;
  g.lanes_per_row = pattern_math::ceil_div(g.num_k_blocks, blocks_per_lane);
}

// The lane length the builder uses for `g`: kMinBlocksPerLane, or longer so
// that the lanes number about kTargetLanes at most.
inline int64_t lane_blocks_for(const RowGrid& g) {
  const int64_t for_target = pattern_math::ceil_div(g.rows * g.num_k_blocks, kTargetLanes);
  return for_target > kMinBlocksPerLane ? for_target : kMinBlocksPerLane;
}

// Calls emit(kb_first, kb_last, full) for the kept blocks among key blocks
// [first, last] of query rows [i0, i1] of mask head h, in key order.
template <typename Emit>
SPATTN_HD void walk_chunk(const RowGrid& g, const PatternExpr& e, int64_t h, int64_t i0, int64_t i1,
                          int64_t first, int64_t last, Emit&& emit) {
  using pattern_math::min64;
  int32_t lo[kStackDepth], hi[kStackDepth];
  int depth = 0;
  if (first <= last) {
    lo[0] = static_cast<int32_t>(first);
    hi[0] = static_cast<int32_t>(last);
    depth = 1;
  }
  while (depth > 0) {
    --depth;
    const int64_t a = lo[depth], b = hi[depth];
    const int64_t j0 = a * g.block_k, j1 = min64(g.k_len, (b + 1) * g.block_k) - 1;
    if (a == b) {
      const BlockClass c = expr_classify_block_exact(e, h, i0, i1, g.offset, j0, j1);
      if (c != BlockClass::Empty) emit(a, a, c == BlockClass::Full);
      continue;
    }
    const BlockClass c = expr_classify_block(e, h, BlockRect{i0, i1, i0 + g.offset, i1 + g.offset, j0, j1});
    if (c == BlockClass::Empty) continue;
    if (c == BlockClass::Full) {
      emit(a, b, true);
      continue;
    }
    const int64_t middle = a + (b - a) / 2;
    lo[depth] = static_cast<int32_t>(middle + 1);  // the right half is popped second
    hi[depth] = static_cast<int32_t>(b);
    ++depth;
    lo[depth] = static_cast<int32_t>(a);
    hi[depth] = static_cast<int32_t>(middle);
    ++depth;
  }
}

// The walk of lane `lane` (0 .. lanes_per_row-1) of row `row` (mask head *
// query blocks + query block).
template <typename Emit>
SPATTN_HD void walk_lane(const RowGrid& g, int64_t row, int64_t lane, Emit&& emit) {
  using pattern_math::min64;
  const int64_t h = row / g.num_q_blocks, qb = row % g.num_q_blocks;
  const PatternExpr& e = g.exprs[g.num_exprs == 1 ? 0 : h / (g.query_heads / g.num_exprs)];
  const int64_t i0 = qb * g.block_q, i1 = min64(g.q_len, i0 + g.block_q) - 1;
  const int64_t first = lane * g.blocks_per_lane, last = min64(first + g.blocks_per_lane, g.num_k_blocks) - 1;
  walk_chunk(g, e, h, i0, i1, first, last, emit);
}

}  // namespace spattn::cuda_detail
