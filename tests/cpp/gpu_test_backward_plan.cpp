// tests/cpp/gpu_test_backward_plan.cpp - the host side of the CUDA backward
// pass, without a device: the backward plan (cuda/bwd_sm80/bwd_plan.hpp) and
// the kernels' tile walks and keep bits (bwd_walk.hpp, bwd_tile_rule.hpp),
// run lane by lane on the host exactly as each thread of the dK/dV and dQ
// kernels runs them, keep every (head, query, key) pair the mask allows
// exactly once in each kernel and no other, for every pattern kind, random
// compositions, per-head masks, GQA, Lq != Lk, masks from arrays and mask
// blocks from 8 to 256; tiles go longest first; the calls the kernels cannot
// take are refused with messages naming what they refuse.
// (gpu_test_backward.cpp checks the gradients on the device.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "cuda/bwd_sm80/bwd_plan.hpp"
#include "cuda/bwd_sm80/bwd_sm80.hpp"
#include "cuda/bwd_sm80/bwd_tile_rule.hpp"
#include "cuda/bwd_sm80/bwd_walk.hpp"
#include "pattern_cases.hpp"
#include "spattn/cuda.hpp"
#include "spattn/spattn.hpp"
#include "test_support.hpp"

namespace spattn::testing {
namespace {

using cuda_detail::BwdPlanView;
using cuda_detail::BwdShape;
using cuda_detail::BwdTile;
using cuda_detail::ColumnWalk;
using cuda_detail::RowWalk;

constexpr int kWarps = 4, kLanes = 32, kTile = 64;

// ---- the plan and the tile rule, walked on the host -------------------------

// How often each (query head, query row, key) pair is kept by one kernel's
// walk, and what the walk got wrong besides.
struct Visits {
  int64_t q_heads, q_len, k_len;
  std::vector<int32_t> count;
  std::vector<std::string> errors;

  Visits(int64_t h, int64_t lq, int64_t lk)
      : q_heads(h), q_len(lq), k_len(lk), count(static_cast<size_t>(h * lq * lk), 0) {}
  void keep(int64_t h, int64_t i, int64_t j) { ++count[static_cast<size_t>((h * q_len + i) * k_len + j)]; }
  void error(const std::string& e) {
    if (errors.size() < 5) errors.push_back(e);
  }
};

// The (row, column) of thread `lane`'s entry s[n][r] in its warp's 16 x 64 product.
int entry_row(int warp, int lane, int r) { return 16 * warp + lane / 4 + 8 * (r >> 1); }
int entry_col(int lane, int n, int r) { return 8 * n + 2 * (lane % 4) + (r & 1); }

// The dK/dV kernel: every (kv head, key tile) CTA, its column walk and each
// thread's keep bits (product rows: keys; columns: the tile's queries).
void walk_key_tiles(const BwdPlanView& plan, const BwdShape& shape, Visits& v) {
  const int32_t per_mask_head = plan.heads_per_mask_head(shape.q_heads);
  const int32_t per_expr = plan.heads_per_expr(shape.q_heads);
  const auto group = static_cast<int32_t>(shape.group());
  for (int32_t kv_head = 0; kv_head < shape.kv_heads; ++kv_head)
    for (int64_t slot = 0; slot < plan.num_k_tiles; ++slot) {
      const int64_t kt = plan.k_tile_order[slot];
      for (ColumnWalk w = ColumnWalk::start(plan, per_mask_head, kv_head * group, (kv_head + 1) * group, kt);
           w.valid(); w.advance(plan, per_mask_head)) {
        const BwdTile tile = w.tile(plan, kt);
        if (tile.q0 >= shape.q_len || tile.k0 != kt * kTile) v.error("a tile outside the queries or of another key tile");
        const PatternExpr* expr = plan.expr_of(w.h, per_expr);
        const int64_t rows_left = shape.q_len - tile.q0;
        for (int warp = 0; warp < kWarps; ++warp) {
          uint32_t words[2][kLanes] = {};
          if (!tile.full)
            for (int second = 0; second < 2; ++second)
              for (int lane = 0; lane < kLanes; ++lane)
                words[second][lane] =
                    cuda_detail::key_rows_lane_word(shape, plan, tile, expr, w.h, warp, lane, second);
          for (int lane = 0; lane < kLanes; ++lane) {
            const uint32_t keep =
                !tile.full ? cuda_detail::gather_key_rows_keep(
                                 [&](int second, int src) { return words[second][src]; }, warp, lane)
                : rows_left < kTile ? cuda_detail::columns_below(rows_left, lane)
                                    : ~0u;
            for (int n = 0; n < 8; ++n)
              for (int r = 0; r < 4; ++r) {
                if (((keep >> cuda_detail::keep_bit(n, r)) & 1u) == 0) continue;
                const int64_t j = tile.k0 + entry_row(warp, lane, r), i = tile.q0 + entry_col(lane, n, r);
                if (i >= shape.q_len)
                  v.error("dK/dV keeps query " + std::to_string(i) + " past the queries");
                else if (j < shape.k_len)  // rows of keys past the keys are never written
                  v.keep(w.h, i, j);
              }
          }
        }
      }
    }
}

// The dQ kernel: every (query head, query tile) CTA, its row walk and each
// thread's keep bits (product rows: query rows; columns: the tile's keys).
void walk_query_tiles(const BwdPlanView& plan, const BwdShape& shape, Visits& v) {
  const int32_t per_mask_head = plan.heads_per_mask_head(shape.q_heads);
  const int32_t per_expr = plan.heads_per_expr(shape.q_heads);
  for (int32_t h = 0; h < shape.q_heads; ++h)
    for (int64_t slot = 0; slot < plan.num_q_tiles; ++slot) {
      const int64_t qt = plan.q_tile_order[slot];
      const PatternExpr* expr = plan.expr_of(h, per_expr);
      for (RowWalk w = RowWalk::start(plan, h / per_mask_head, qt); w.valid(plan); w.advance(plan)) {
        const BwdTile tile = w.tile(plan, qt);
        if (tile.k0 >= shape.k_len || tile.q0 != qt * kTile) v.error("a tile outside the keys or of another query tile");
        const int64_t keys_left = shape.k_len - tile.k0;
        for (int warp = 0; warp < kWarps; ++warp) {
          uint32_t words[kLanes] = {};
          if (!tile.full)
            for (int lane = 0; lane < kLanes; ++lane)
              words[lane] = cuda_detail::query_rows_lane_word(shape, plan, tile, expr, h, warp, lane);
          for (int lane = 0; lane < kLanes; ++lane) {
            const uint32_t keep =
                !tile.full ? cuda_detail::gather_query_rows_keep([&](int src) { return words[src]; }, lane)
                : keys_left < kTile ? cuda_detail::columns_below(keys_left, lane)
                                    : ~0u;
            for (int n = 0; n < 8; ++n)
              for (int r = 0; r < 4; ++r) {
                if (((keep >> cuda_detail::keep_bit(n, r)) & 1u) == 0) continue;
                const int64_t i = tile.q0 + entry_row(warp, lane, r), j = tile.k0 + entry_col(lane, n, r);
                if (j >= shape.k_len)
                  v.error("dQ keeps key " + std::to_string(j) + " past the keys");
                else if (i < shape.q_len)  // rows past the queries are never written
                  v.keep(h, i, j);
              }
          }
        }
      }
    }
}

// Both kernels' walks keep each pair the mask allows exactly once and no other.
void expect_walks_cover_the_mask(const Pattern& pattern, const MaskShape& s, int64_t kv_heads,
                                 const std::string& name) {
  SCOPED_TRACE(name + ", Lq " + std::to_string(s.q_len) + " Lk " + std::to_string(s.k_len) + " blocks " +
               std::to_string(s.block_q) + "x" + std::to_string(s.block_k) + " Hq " + std::to_string(s.num_heads) +
               " Hkv " + std::to_string(kv_heads));
  const BlockMask mask = BlockMask::build(pattern, s);
  const cuda_detail::BackwardLists lists = cuda_detail::make_backward_lists(mask);
  const BwdPlanView plan = lists.host_view();
  const BwdShape shape{1, s.num_heads, kv_heads, s.q_len, s.k_len, 64};
  Visits by_keys(s.num_heads, s.q_len, s.k_len), by_queries(s.num_heads, s.q_len, s.k_len);
  walk_key_tiles(plan, shape, by_keys);
  walk_query_tiles(plan, shape, by_queries);
  for (const Visits* v : {&by_keys, &by_queries}) {
    const char* kernel = v == &by_keys ? "dK/dV" : "dQ";
    for (const std::string& e : v->errors) ADD_FAILURE() << kernel << ": " << e;
    int reported = 0;
    for (int64_t h = 0; h < s.num_heads && reported < 5; ++h)
      for (int64_t i = 0; i < s.q_len && reported < 5; ++i)
        for (int64_t j = 0; j < s.k_len && reported < 5; ++j) {
          const int32_t want = mask.allowed(h, s.num_heads, i, j) ? 1 : 0;
          const int32_t got = v->count[static_cast<size_t>((h * s.q_len + i) * s.k_len + j)];
          if (got != want) {
            ADD_FAILURE() << kernel << ": pair (h " << h << ", i " << i << ", j " << j << ") kept " << got
                          << " times, the mask says " << want;
            ++reported;
          }
        }
  }
}

TEST(BackwardPlanWalk, EveryPatternKindAndBlockSize) {
  std::mt19937_64 rng(4747);
  const int64_t L = 333;
  const std::vector<Case> cases = {
      dense_case(false), causal_case(), block_diagonal_case(100, false), sliding_window_case(64, 32, false),
      window_case(200), streaming_case(16, 100), strided_case(37), fixed_case(64, 8),
      bigbird_case(L, 64, 3, 1, 3, 7, false), longformer_case(64, {0, 200, 332}, false),
      custom_case(rng, L, L, 4, 64, 64, 0.3, false, false), custom_case(rng, L, L, 1, 16, 48, 0.4, true, true),
      dilated_case({128, 256}, {2, 4}, false), unite_case(dilated_case({256}, {4}, true), window_case(64)),
      intersect_case(window_case(150), strided_case(5)),
      per_head_case({streaming_case(8, 50), dense_case(true)}, 4)};
  const std::pair<int64_t, int64_t> blocks[] = {{64, 64}, {128, 128}, {16, 16}, {32, 128}, {256, 32}, {192, 64}, {8, 8}};
  for (const Case& c : cases)
    for (const auto& [bq, bk] : blocks) expect_walks_cover_the_mask(c.pattern, {L, L, bq, bk, 4}, 2, c.name);
}

TEST(BackwardPlanWalk, RandomPatternsLengthsHeadsAndBlocks) {
  std::mt19937_64 rng(4748);
  const int64_t sides[] = {8, 16, 32, 64, 128, 192, 256};
  for (int round = 0; round < 60; ++round) {
    const int64_t lq = draw(rng, 1, 300), lk = draw(rng, 1, 300);
    const int64_t kv_heads = draw(rng, 1, 2), q_heads = kv_heads * draw(rng, 1, 3);
    const Case c = random_case(rng, lq, lk, q_heads);
    const int64_t bq = sides[draw(rng, 0, 6)], bk = sides[draw(rng, 0, 6)];
    if ((kTile / std::min<int64_t>(bq, kTile)) * (kTile / std::min<int64_t>(bk, kTile)) > 64) continue;
    expect_walks_cover_the_mask(c.pattern, {lq, lk, bq, bk, q_heads}, kv_heads, c.name);
  }
}

// The plan of a mask made from arrays (no pattern, every block full, rows
// without blocks), at a block the tile walks directly and one it splits.
TEST(BackwardPlanWalk, MaskFromArraysWithEmptyRows) {
  for (const int64_t block : {64, 32}) {
    const int64_t L = 300, n = ceil_div(L, block);
    std::mt19937_64 rng(4749);
    std::vector<int64_t> offsets{0};
    std::vector<int32_t> indices;
    for (int64_t r = 0; r < 2 * n; ++r) {
      if (r % 3 != 1)
        for (int64_t c = 0; c < n; ++c)
          if (draw(rng, 0, 2) == 0) indices.push_back(static_cast<int32_t>(c));
      offsets.push_back(static_cast<int64_t>(indices.size()));
    }
    const std::vector<uint8_t> full(indices.size(), 1);
    const BlockMask mask(L, L, block, block, 2, offsets, indices, full);
    const cuda_detail::BackwardLists lists = cuda_detail::make_backward_lists(mask);
    const BwdPlanView plan = lists.host_view();
    EXPECT_EQ(plan.exprs, nullptr);
    const BwdShape shape{1, 4, 2, L, L, 64};
    Visits by_keys(4, L, L), by_queries(4, L, L);
    walk_key_tiles(plan, shape, by_keys);
    walk_query_tiles(plan, shape, by_queries);
    EXPECT_TRUE(by_keys.errors.empty() && by_queries.errors.empty());
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < L; ++j) {
          const int32_t want = mask.allowed(h, 4, i, j) ? 1 : 0;
          const size_t at = static_cast<size_t>((h * L + i) * L + j);
          ASSERT_EQ(by_keys.count[at], want) << "block " << block << " h " << h << " i " << i << " j " << j;
          ASSERT_EQ(by_queries.count[at], want) << "block " << block << " h " << h << " i " << i << " j " << j;
        }
  }
}

// Tiles go longest first: causal's first key tiles and last query tiles.
TEST(BackwardPlanWalk, TilesLongestFirst) {
  const BlockMask mask = BlockMask::build(Pattern::causal(), {1000, 1000, 128, 128, 1});
  const cuda_detail::BackwardLists lists = cuda_detail::make_backward_lists(mask);
  ASSERT_EQ(lists.k_tile_order.size(), 16u);
  ASSERT_EQ(lists.q_tile_order.size(), 16u);
  EXPECT_EQ(lists.k_tile_order.front(), 0);
  EXPECT_EQ(lists.q_tile_order.front(), 14);  // the last two tiles share the last 128-row block
  std::vector<int32_t> sorted = lists.k_tile_order;
  std::sort(sorted.begin(), sorted.end());
  for (int32_t t = 0; t < 16; ++t) EXPECT_EQ(sorted[static_cast<size_t>(t)], t);
}

// ---- refusals ----------------------------------------------------------------

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(BackwardRefusals, BlockSizesTheTileCannotTake) {
  const BlockMask odd = BlockMask::build(Pattern::causal(), {300, 300, 48, 64, 1});
  EXPECT_NE(error_of([&] { cuda_detail::check_backward_mask(odd); }).find("CUDA backward: mask blocks of 48 x 64"),
            std::string::npos);
  const BlockMask tiny = BlockMask::build(Pattern::causal(), {300, 300, 4, 4, 1});
  EXPECT_NE(error_of([&] { cuda_detail::check_backward_mask(tiny); }).find("at most 64 blocks per tile"),
            std::string::npos);
}

// Host tensors reach the CUDA checks after the shared validation: dtype and
// head dim are refused before any pointer is looked at.
TEST(BackwardRefusals, DtypesHeadDimsAndMemory) {
  const auto message = [](DType dtype, DType grad_dtype, int64_t D) {
    const int64_t L = 70;
    HostTensor q(dtype, 1, 2, L, D), k(dtype, 1, 1, L, D), out(dtype, 1, 2, L, D), d_out(dtype, 1, 2, L, D);
    HostTensor lse(DType::F32, 1, 2, L, 1), dq(grad_dtype, 1, 2, L, D), dk(grad_dtype, 1, 1, L, D);
    const BlockMask mask = BlockMask::build(Pattern::causal(), {L, L, 64, 64, 2});
    return error_of([&] {
      cuda_attention_backward(q.view, k.view, k.view, out.view, lse.view, d_out.view, {dq.view, dk.view, dk.view},
                              mask, 0.125);
    });
  };
  EXPECT_NE(message(DType::F32, DType::F32, 64).find("CUDA backward: q dtype must be fp16 or bf16, got fp32"),
            std::string::npos);
  EXPECT_NE(message(DType::BF16, DType::F16, 64).find("CUDA backward: dq, dk and dv must all be bf16 or all fp32"),
            std::string::npos);
  EXPECT_NE(message(DType::BF16, DType::BF16, 96).find("CUDA backward: head_dim must be one of"), std::string::npos);
  const bool built_64 = error_of([] { cuda_detail::check_bwd_sm80_head_dim(64); }) == "no error";
  EXPECT_NE(message(DType::F16, DType::F32, built_64 ? 64 : 128).find("CUDA backward: q must point to device memory"),
            std::string::npos);
}

}  // namespace
}  // namespace spattn::testing
