// tests/cpp/test_device_mask_walk.cpp - the device mask builder's per-lane walk
// (cuda/plan/device_mask_walk.hpp) run lane by lane on the host: concatenated
// in lane order, the lanes' blocks must be BlockMask::build's arrays exactly,
// for every pattern kind, composites, per-head mixes, odd shapes, block sizes
// and lane lengths (the GPU suite checks the kernels themselves).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cuda/plan/device_mask_walk.hpp"
#include "pattern/build_checks.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

using cuda_detail::RowGrid;

void expect_walk_matches_build(const Case& c, const MaskShape& s, int64_t blocks_per_lane) {
  SCOPED_TRACE(c.name + ", Lq " + std::to_string(s.q_len) + " Lk " + std::to_string(s.k_len) + " blocks " +
               std::to_string(s.block_q) + "x" + std::to_string(s.block_k) + " heads " +
               std::to_string(s.num_heads) + ", lanes of " + std::to_string(blocks_per_lane) + " blocks");
  const BlockMask host = BlockMask::build(c.pattern, s);
  RowGrid g;
  g.exprs = c.pattern.exprs().data();
  g.num_exprs = c.pattern.num_exprs();
  g.query_heads = s.num_heads;
  g.num_q_blocks = ceil_div(s.q_len, s.block_q);
  g.num_k_blocks = ceil_div(s.k_len, s.block_k);
  g.rows = plan_mask_heads(c.pattern, s) * g.num_q_blocks;
  g.q_len = s.q_len;
  g.k_len = s.k_len;
  g.block_q = s.block_q;
  g.block_k = s.block_k;
  g.offset = s.k_len - s.q_len;
  cuda_detail::set_lanes(g, blocks_per_lane);
  std::vector<int64_t> row_offsets{0};
  std::vector<int32_t> indices;
  std::vector<uint8_t> full;
  for (int64_t row = 0; row < g.rows; ++row) {
    for (int64_t lane = 0; lane < g.lanes_per_row; ++lane)
      cuda_detail::walk_lane(g, row, lane, [&](int64_t a, int64_t b, bool is_full) {
        for (int64_t kb = a; kb <= b; ++kb) {
          indices.push_back(static_cast<int32_t>(kb));
          full.push_back(is_full ? 1 : 0);
        }
      });
    row_offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  ASSERT_EQ(row_offsets, host.row_offsets());
  ASSERT_EQ(indices, host.kv_indices());
  ASSERT_EQ(full, host.kv_full());
}

TEST(DeviceMaskWalk, EveryPatternKindOddShapes) {
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {300, 1000}, {1000, 300}, {1000, 1000}};
  const std::pair<int64_t, int64_t> blocks[] = {{1, 1}, {3, 16}, {16, 16}, {64, 32}, {256, 128}};
  std::mt19937_64 rng(3);
  for (const auto& [lq, lk] : lengths)
    for (const auto& [bq, bk] : blocks)
      for (int kind = 0; kind < kNumLeafKinds; ++kind) {
        const MaskShape s{lq, lk, bq, bk, kind == 8 ? 3 : 2};
        expect_walk_matches_build(random_leaf(rng, kind, lq, lk, s.num_heads), s, draw(rng, 1, 40));
        if (HasFatalFailure()) return;
      }
}

TEST(DeviceMaskWalk, CompositesAndPerHeadMixes) {
  std::mt19937_64 rng(8);
  for (int n = 0; n < 600; ++n) {
    const int64_t lq = draw(rng, 1, 700), lk = draw(rng, 0, 2) ? lq : draw(rng, 1, 700);
    const MaskShape s{lq, lk, draw(rng, 1, 80), draw(rng, 1, 80), 2 * draw(rng, 1, 2)};
    expect_walk_matches_build(random_case(rng, lq, lk, s.num_heads), s, draw(rng, 1, 40));
    if (HasFatalFailure()) return;
  }
}

// Rows of many key blocks, walked in long lanes and in the builder's own.
TEST(DeviceMaskWalk, LongRows) {
  const int64_t L = 65536 + 77;
  const Case cases[] = {causal_case(), streaming_case(128, 4096), strided_case(4096), fixed_case(4096, 128),
                        window_case(4096)};
  for (const Case& c : cases) {
    const MaskShape s{L, L, 128, 64, 1};
    expect_walk_matches_build(c, s, 64);
    expect_walk_matches_build(c, s, cuda_detail::kMinBlocksPerLane);
    if (HasFatalFailure()) return;
  }
}

TEST(DeviceMaskWalk, LaneLengthKeepsTheLaneCountBounded) {
  RowGrid g;
  g.rows = 1024;
  g.num_k_blocks = 1024;  // L = 131072, block 128
  EXPECT_EQ(cuda_detail::lane_blocks_for(g), cuda_detail::kMinBlocksPerLane);
  g.rows = g.num_k_blocks = 8192;  // L = 1M
  const int64_t blocks = cuda_detail::lane_blocks_for(g);
  cuda_detail::set_lanes(g, blocks);
  EXPECT_LE(g.rows * g.lanes_per_row, cuda_detail::kTargetLanes + g.rows);
  EXPECT_GE(g.lanes_per_row * g.blocks_per_lane, g.num_k_blocks);
}

}  // namespace
}  // namespace spattn::testing
