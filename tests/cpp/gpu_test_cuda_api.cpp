// tests/cpp/gpu_test_cuda_api.cpp - the CUDA backend's contract beyond the
// numbers: the tile plan and the dilated split (host-only, run without a
// GPU), input errors that
// name the offending value, capture of an attention call in a CUDA graph, and
// dispatch through attention().
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda/common/excluded_keys.hpp"
#include "cuda/common/keep_bit_classes.hpp"
#include "cuda/common/row_key_bits.hpp"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/plan/cuda_plan.hpp"
#include "cuda/plan/dilated_split.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "plan/plan_cache.hpp"
#include "plan/plan_state.hpp"
#include "spattn/pattern.hpp"
#include "gpu_test_support.hpp"
#include "pattern_cases.hpp"

namespace spattn::testing {
namespace {

using cuda_detail::HostTilePlan;
using cuda_detail::PlanSplit;
using cuda_detail::TileShape;

// Is pair (i, j) allowed according to the tile plan (as the kernel reads it)?
bool plan_allows(const BlockMask& mask, const HostTilePlan& plan, TileShape tile, int64_t h, int64_t i,
                 int64_t j) {
  const int64_t num_q_tiles = (mask.q_len() + tile.rows - 1) / tile.rows;
  const int64_t g = h;  // the test walks query heads == mask heads
  const int64_t t = i / tile.rows, u = j / tile.cols;
  const PatternExpr* expr = mask.pattern() ? &mask.pattern()->expr_for_head(h, mask.num_heads()) : nullptr;
  const int64_t shift = mask.k_len() - mask.q_len();
  if (!plan.derived) {
    const BlockMaskView view = mask.view();
    const int64_t r = view.row(g, t * tile.rows / mask.block_q());
    for (int64_t at = view.row_begin(r); at < view.row_end(r); ++at) {
      const int64_t first = view.kv_indices[at] * (mask.block_k() / tile.cols);
      if (u < first || u >= first + mask.block_k() / tile.cols) continue;
      return view.kv_full[at] || expr_allows(*expr, h, i, i + shift, j);
    }
    return false;
  }
  const cuda_detail::TileGrainMask& grain = *plan.derived;
  const int64_t r = g * num_q_tiles + t;
  for (int64_t at = grain.row_offsets[r]; at < grain.row_offsets[r + 1]; ++at) {
    if (grain.kv_indices[at] != u) continue;
    if (grain.kv_full[at]) return true;
    const int64_t bit = ((i - t * tile.rows) >> plan.sub.row_shift) * plan.sub.cols +
                        ((j - u * tile.cols) >> plan.sub.col_shift);
    if (!((grain.sub_present[at] >> bit) & 1)) return false;
    return ((grain.sub_full[at] >> bit) & 1) || expr_allows(*expr, h, i, i + shift, j);
  }
  return false;
}

void expect_error_mentions(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

int64_t item_length(const HostTilePlan& plan, int32_t n) {
  const cuda_detail::WorkItem& item = plan.items[static_cast<size_t>(n)];
  return item.end - item.begin;
}

// Each band's items are longer than 2/3 of the band's longest, and the next
// band's longest is no longer than that; empty items (rows without a kept
// block) share the last band; the bands end at the item count. Within a band
// the items go mask head by mask head, the longest first in each.
void expect_length_bands(const HostTilePlan& plan, int64_t num_q_tiles) {
  ASSERT_GE(plan.band_first.size(), 2u);
  EXPECT_EQ(plan.band_first.front(), 0);
  EXPECT_EQ(plan.band_first.back(), static_cast<int32_t>(plan.items.size()));
  int64_t longest_before = -1;
  for (size_t k = 0; k + 1 < plan.band_first.size(); ++k) {
    const int32_t first = plan.band_first[k], end = plan.band_first[k + 1];
    ASSERT_LT(first, end);
    int64_t longest = 0;
    for (int32_t n = first; n < end; ++n) longest = std::max(longest, item_length(plan, n));
    if (k == 0) {
      EXPECT_EQ(longest, plan.max_item_entries);
    }
    if (longest_before >= 0) {
      EXPECT_GT(longest_before, 0) << "band " << k << ": an empty band before it";
      EXPECT_LE(3 * longest, 2 * longest_before) << "band " << k;
    }
    for (int32_t n = first; n < end; ++n) {
      EXPECT_TRUE(3 * item_length(plan, n) > 2 * longest || longest == 0) << "item " << n;
      if (n == first) continue;
      const int64_t head = plan.items[static_cast<size_t>(n)].row / num_q_tiles;
      const int64_t head_before = plan.items[static_cast<size_t>(n) - 1].row / num_q_tiles;
      EXPECT_GE(head, head_before) << "item " << n;
      if (head == head_before) {
        EXPECT_GE(item_length(plan, n - 1), item_length(plan, n)) << "item " << n;
      }
    }
    longest_before = longest;
  }
}

// Work items: each row's entries covered exactly once, in order; split rows'
// pieces in consecutive slots; items in length bands (expect_length_bands).
void expect_items_cover_every_row_once(const BlockMask& mask, const HostTilePlan& plan, TileShape tile) {
  const int64_t num_q_tiles = (mask.q_len() + tile.rows - 1) / tile.rows;
  const int64_t rows = mask.num_heads() * num_q_tiles;
  expect_length_bands(plan, num_q_tiles);
  std::vector<std::vector<cuda_detail::WorkItem>> by_row(static_cast<size_t>(rows));
  for (const cuda_detail::WorkItem& item : plan.items) by_row.at(static_cast<size_t>(item.row)).push_back(item);
  const std::vector<int64_t>& offsets = plan.derived ? plan.derived->row_offsets : mask.row_offsets();
  int64_t split = 0;
  for (int64_t r = 0; r < rows; ++r) {
    auto& items = by_row[static_cast<size_t>(r)];
    ASSERT_FALSE(items.empty()) << "row " << r;
    std::sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.begin < b.begin; });
    const int64_t mask_row = plan.derived ? r : r / num_q_tiles * mask.num_q_blocks() +
                                                    r % num_q_tiles * tile.rows / mask.block_q();
    EXPECT_EQ(items.front().begin, offsets[mask_row]);
    EXPECT_EQ(items.back().end, offsets[mask_row + 1]);
    for (size_t n = 1; n < items.size(); ++n) EXPECT_EQ(items[n].begin, items[n - 1].end);
    if (items.size() == 1) {
      EXPECT_EQ(items[0].slot, -1);
      continue;
    }
    const cuda_detail::SplitRow& s = plan.split_rows.at(static_cast<size_t>(split++));
    EXPECT_EQ(s.row, r);
    EXPECT_EQ(s.pieces, static_cast<int32_t>(items.size()));
    for (size_t n = 0; n < items.size(); ++n) EXPECT_EQ(items[n].slot, s.first_slot + static_cast<int32_t>(n));
  }
  EXPECT_EQ(split, static_cast<int64_t>(plan.split_rows.size()));
}

TEST(CudaTilePlan, SplitsRowsFarLongerThanTheAverage) {
  // Longformer global tokens make whole rows of keys: far above the average.
  const BlockMask mask =
      BlockMask::build(Pattern::longformer(128, {0, 1, 3000}), MaskShape{6000, 6000, 128, 128, 1});
  const HostTilePlan plan = cuda_detail::make_tile_plan(mask, TileShape{128, 64});
  EXPECT_EQ(plan.split_rows.size(), 2u);  // the query tiles holding tokens 0, 1 and 3000
  expect_items_cover_every_row_once(mask, plan, TileShape{128, 64});
}

// A plan asked to keep rows of up to whole_row_tiles key tiles whole (a
// call whose work per running CTA is that long) splits only longer rows,
// into pieces of about that many; below the plain rule's pieces it changes
// nothing. BigBird at 32K (block 128, 128 x 128 tiles): 256 query tiles, the
// two global rows 256 tiles long, every other row 8.
TEST(CudaTilePlan, KeepsRowsWholeUpToTheCallsShare) {
  const TileShape tile{128, 128};
  const BlockMask bigbird =
      BlockMask::build(Pattern::bigbird(32768, 128, 3, 1, 3, 0), MaskShape{32768, 32768, 128, 128, 1});
  const HostTilePlan plain = cuda_detail::make_tile_plan(bigbird, tile);
  ASSERT_EQ(plain.split_rows.size(), 2u);
  const int64_t plain_piece = cuda_detail::split_piece_tiles(cuda_detail::tile_plan_key_tiles(bigbird, tile), 256);
  EXPECT_EQ(plain_piece, cuda_detail::kMinSplitTiles);  // twice the average row is less
  EXPECT_EQ(plain.split_rows[0].pieces, 256 / plain_piece);
  const auto whole_rows = [](int64_t tiles) {
    PlanSplit split;
    split.whole_row_tiles = tiles;
    return split;
  };
  const HostTilePlan whole = cuda_detail::make_tile_plan(bigbird, tile, whole_rows(256));
  EXPECT_TRUE(whole.split_rows.empty());
  EXPECT_EQ(whole.items.size(), 256u);
  EXPECT_EQ(whole.max_item_entries, 256);
  expect_items_cover_every_row_once(bigbird, whole, tile);
  const HostTilePlan halves = cuda_detail::make_tile_plan(bigbird, tile, whole_rows(128));
  ASSERT_EQ(halves.split_rows.size(), 2u);
  for (const cuda_detail::SplitRow& split : halves.split_rows) EXPECT_EQ(split.pieces, 2);
  expect_items_cover_every_row_once(bigbird, halves, tile);
  const HostTilePlan below = cuda_detail::make_tile_plan(bigbird, tile, whole_rows(16));
  ASSERT_EQ(below.items.size(), plain.items.size());
  EXPECT_EQ(below.split_rows.size(), plain.split_rows.size());
  EXPECT_EQ(below.split_rows[0].pieces, plain.split_rows[0].pieces);
}

// A grid of equal rows whose units leave a last round that few CTAs work in
// splits the last ceil(remainder / copies) rows into pieces of a quarter of
// their tiles per running CTA (at least kMinTailPieceTiles), so that they
// fill that round: dense attention at 32K with 16 heads on 132 CTAs (4096
// units: 31 rounds and 4 units), at 128K with 8 heads, and at 32K on two
// CTAs per multiprocessor; no split where the units divide evenly, fill
// less than a round or the pieces would be as long as the rows.
TEST(CudaTilePlan, SpreadsTheLastRoundOfEqualRows) {
  using cuda_detail::tail_split;
  const PlanSplit dense_32k = tail_split(256, 256, 16, 132);
  EXPECT_EQ(dense_32k.tail_rows, 1);                    // 4096 % 132 = 4 units, one row of 16 copies
  EXPECT_EQ(dense_32k.tail_piece_tiles, 16);            // ceil(16 x 256 / 528) = 8, at least 16
  const PlanSplit dense_128k = tail_split(1024, 1024, 8, 132);
  EXPECT_EQ(dense_128k.tail_rows, 1);                   // 8192 % 132 = 8 units
  EXPECT_EQ(dense_128k.tail_piece_tiles, 16);           // ceil(8 x 1024 / 528)
  const PlanSplit two_per_sm = tail_split(256, 256, 16, 264);
  EXPECT_EQ(two_per_sm.tail_rows, 9);                   // 4096 % 264 = 136 units
  EXPECT_EQ(two_per_sm.tail_piece_tiles, 35);           // ceil(9 x 16 x 256 / 1056)
  EXPECT_EQ(tail_split(264, 64, 1, 132), PlanSplit{});  // two rounds exactly
  EXPECT_EQ(tail_split(8, 100, 16, 132), PlanSplit{});  // 128 units, less than a round
  EXPECT_EQ(tail_split(40, 30, 4, 132), PlanSplit{});   // pieces of 16 of rows of 30 tiles
  EXPECT_EQ(tail_split(256, 256, 0, 132), PlanSplit{});
  expect_error_mentions([] { tail_split(256, 256, 16, 0); }, "0 CTAs");

  const TileShape tile{128, 128};
  const BlockMask dense = BlockMask::build(Pattern::dense(), MaskShape{32768, 32768, 128, 128, 1});
  const HostTilePlan plan = cuda_detail::make_tile_plan(dense, tile, dense_32k);
  ASSERT_EQ(plan.split_rows.size(), 1u);
  EXPECT_EQ(plan.split_rows[0].row, 255);
  EXPECT_EQ(plan.split_rows[0].pieces, 16);
  ASSERT_EQ(plan.items.size(), 255u + 16u);
  for (size_t n = 0; n < plan.items.size(); ++n)  // whole rows first, then the pieces
    EXPECT_EQ(plan.items[n].end - plan.items[n].begin, n < 255 ? 256 : 16) << "item " << n;
  expect_items_cover_every_row_once(dense, plan, tile);
  // Longer pieces than the rows' own split (rows far longer than the
  // average) change nothing there: BigBird's global rows keep their pieces.
  const BlockMask bigbird =
      BlockMask::build(Pattern::bigbird(32768, 128, 3, 1, 3, 0), MaskShape{32768, 32768, 128, 128, 1});
  PlanSplit tail;
  tail.tail_rows = 256;
  tail.tail_piece_tiles = 64;
  const HostTilePlan plain = cuda_detail::make_tile_plan(bigbird, tile);
  const HostTilePlan tailed = cuda_detail::make_tile_plan(bigbird, tile, tail);
  ASSERT_EQ(tailed.split_rows.size(), plain.split_rows.size());
  EXPECT_EQ(tailed.split_rows[0].pieces, plain.split_rows[0].pieces);
  EXPECT_EQ(tailed.items.size(), plain.items.size());
  tail.tail_piece_tiles = 0;
  expect_error_mentions([&] { cuda_detail::make_tile_plan(bigbird, tile, tail); }, "tail_piece_tiles > 0, got 0");
}

// A plan asked for more items than it has rows (a call of few query tiles
// and heads) splits every row longer than total / min_items key tiles, in
// pieces of at least the least piece asked for (kMinFillPieceTiles, or
// kMinFillPieceTilesFewRows where a tile holds few query rows); asked for no
// more than its rows, it is the plain plan.
TEST(CudaTilePlan, SplitsFewLongRowsToFillTheDevice) {
  using cuda_detail::kMinFillPieceTiles;
  using cuda_detail::kMinFillPieceTilesFewRows;
  const TileShape tile{128, 128};
  // One query tile over 128 key tiles (a decoding step over 16K keys).
  const BlockMask decode = BlockMask::build(Pattern::dense(), MaskShape{100, 16384, 128, 128, 1});
  ASSERT_EQ(cuda_detail::make_tile_plan(decode, tile).items.size(), 1u);
  // Asked for 9 items: pieces of ceil(128 / 9) = 15 tiles.
  const HostTilePlan nine = cuda_detail::make_tile_plan(decode, tile, PlanSplit{9});
  EXPECT_EQ(nine.items.size(), 9u);
  ASSERT_EQ(nine.split_rows.size(), 1u);
  EXPECT_EQ(nine.split_rows[0].pieces, 9);
  expect_items_cover_every_row_once(decode, nine, tile);
  for (const int64_t piece : {kMinFillPieceTiles, kMinFillPieceTilesFewRows}) {
    SCOPED_TRACE(::testing::Message() << "least piece " << piece);
    const HostTilePlan most = cuda_detail::make_tile_plan(decode, tile, PlanSplit{1000, piece});
    EXPECT_EQ(static_cast<int64_t>(most.items.size()), 128 / piece);
    for (const cuda_detail::WorkItem& item : most.items) EXPECT_EQ(item.end - item.begin, piece);
    expect_items_cover_every_row_once(decode, most, tile);
    // A streaming row (a sink block and the 32 blocks of its window: 33
    // tiles) splits into pieces of the least size; 256-key blocks count two
    // tiles each, so a piece takes half as many of them.
    const HostTilePlan streaming = cuda_detail::make_tile_plan(
        BlockMask::build(Pattern::streaming(128, 4096), MaskShape{1, 32768, 128, 128, 1}), tile, PlanSplit{264, piece});
    EXPECT_EQ(static_cast<int64_t>(streaming.items.size()), (33 + piece - 1) / piece);
    const BlockMask wide = BlockMask::build(Pattern::dense(), MaskShape{128, 8192, 128, 256, 1});
    const HostTilePlan wide_plan = cuda_detail::make_tile_plan(wide, tile, PlanSplit{100, piece});
    const int64_t wide_piece_blocks = (piece + 1) / 2;
    EXPECT_EQ(static_cast<int64_t>(wide_plan.items.size()), (32 + wide_piece_blocks - 1) / wide_piece_blocks);
    expect_items_cover_every_row_once(wide, wide_plan, tile);
    // Causal rows of 1..piece tiles: none longer than a piece, none split.
    const int64_t short_len = 128 * piece;
    const BlockMask causal = BlockMask::build(Pattern::causal(), MaskShape{short_len, short_len, 128, 128, 2});
    EXPECT_TRUE(cuda_detail::make_tile_plan(causal, tile, PlanSplit{100, piece}).split_rows.empty());
  }
  // The least piece of a call: short where at most a quarter of a tile's rows
  // hold queries.
  EXPECT_EQ(cuda_detail::min_fill_piece_tiles(1, tile), kMinFillPieceTilesFewRows);
  EXPECT_EQ(cuda_detail::min_fill_piece_tiles(32, tile), kMinFillPieceTilesFewRows);
  EXPECT_EQ(cuda_detail::min_fill_piece_tiles(33, tile), kMinFillPieceTiles);
  EXPECT_EQ(cuda_detail::min_fill_piece_tiles(128, tile), kMinFillPieceTiles);
  // Causal rows of 1..64 tiles (one mask head, shared by the two query
  // heads): asked for no more items than its 64 rows, the plain plan; asked
  // for 200, the rows longer than ceil(2080 / 200) = 11 tiles split, into
  // pieces of at most 11.
  static_assert(kMinFillPieceTiles <= 11, "the pieces below are of ceil(2080 / 200) tiles");
  const BlockMask long_causal = BlockMask::build(Pattern::causal(), MaskShape{8192, 8192, 128, 128, 2});
  ASSERT_EQ(long_causal.num_heads(), 1);
  const HostTilePlan plain = cuda_detail::make_tile_plan(long_causal, tile);
  const HostTilePlan as_many = cuda_detail::make_tile_plan(long_causal, tile, PlanSplit{64});
  ASSERT_EQ(as_many.items.size(), plain.items.size());
  for (size_t n = 0; n < plain.items.size(); ++n) {
    EXPECT_EQ(as_many.items[n].begin, plain.items[n].begin);
    EXPECT_EQ(as_many.items[n].end, plain.items[n].end);
  }
  EXPECT_TRUE(as_many.split_rows.empty());
  const HostTilePlan filled = cuda_detail::make_tile_plan(long_causal, tile, PlanSplit{200});
  EXPECT_EQ(filled.split_rows.size(), 64u - 11u);
  for (const cuda_detail::WorkItem& item : filled.items) EXPECT_LE(item.end - item.begin, 11) << "row " << item.row;
  expect_items_cover_every_row_once(long_causal, filled, tile);
}

// Grouped query heads of a few query positions: the heads of a kv head are
// packed into one tile's rows where they share the mask and their rows fit
// (validated calls).
TEST(CudaQueryHeadPacking, OnlyWhereTheGroupSharesTheMask) {
  using cuda_detail::packed_query_heads;
  const auto mask = [](const Pattern& pattern, int64_t heads) {
    return BlockMask::build(pattern, MaskShape{1, 4096, 128, 128, heads});
  };
  const BlockMask causal = mask(Pattern::causal(), 32);
  EXPECT_EQ(causal.num_heads(), 1);
  EXPECT_EQ(packed_query_heads(1, 32, 8, causal), 4);
  EXPECT_EQ(packed_query_heads(1, 32, 1, causal), 32);  // MQA
  EXPECT_EQ(packed_query_heads(1, 28, 4, causal), 7);   // groups of any size up to a tile's rows
  EXPECT_EQ(packed_query_heads(1, 256, 1, causal), 1);  // more than a tile's rows
  EXPECT_EQ(packed_query_heads(2, 32, 8, causal), 4);   // a few query positions
  EXPECT_EQ(packed_query_heads(32, 32, 8, causal), 4);  // 32 positions of 4 heads: a tile's 128 rows
  EXPECT_EQ(packed_query_heads(33, 32, 8, causal), 1);  // more than a tile's rows
  EXPECT_EQ(packed_query_heads(5, 32, 1, causal), 1);   // 160 rows
  EXPECT_EQ(packed_query_heads(1, 8, 8, causal), 1);    // no grouping
  // Head-dependent patterns (a per-head mix, a dilated rate, per-head custom
  // tables) have a mask head per query head: never packed.
  const Pattern mix = Pattern::per_head({Pattern::causal(), Pattern::sliding_window(512), Pattern::causal(),
                                         Pattern::streaming(4, 64)});
  EXPECT_EQ(packed_query_heads(1, 32, 8, mask(mix, 32)), 1);
  EXPECT_EQ(packed_query_heads(1, 32, 8, mask(Pattern::dilated({256}, {4}), 32)), 1);
  const std::vector<uint8_t> blocks(4 * 32, 1);  // per-head tables of one row of 32 blocks, four heads
  EXPECT_EQ(packed_query_heads(1, 4, 2, mask(Pattern::custom(blocks, 4, 1, 32, 128, 128), 4)), 1);
}

TEST(CudaTilePlan, LengthBandsCoverTheItemsInOrder) {
  // Causal rows of 1..47 tiles.
  const HostTilePlan causal = cuda_detail::make_tile_plan(
      BlockMask::build(Pattern::causal(), MaskShape{6000, 6000, 128, 128, 2}), TileShape{128, 128});
  expect_length_bands(causal, 47);
  EXPECT_EQ(causal.band_first.size(), 10u);  // bands start at rows of 47, 31, 20, 13, 8, 5, 3, 2, 1 tiles
  // More queries than keys: 96 of 128 causal rows have no key at all.
  const HostTilePlan empty_rows = cuda_detail::make_tile_plan(
      BlockMask::build(Pattern::causal(), MaskShape{16384, 4096, 128, 128, 1}), TileShape{128, 128});
  expect_length_bands(empty_rows, 128);
  EXPECT_EQ(empty_rows.band_first.end()[-2], 32);  // the empty rows: one band after the 32 others
  // A per-head mix: causal heads and sliding-window heads, whose rows share
  // the bands of the causal rows of their length.
  const Pattern mix = Pattern::per_head({Pattern::causal(), Pattern::causal(), Pattern::sliding_window(512)});
  const BlockMask mixed = BlockMask::build(mix, MaskShape{4096, 4096, 128, 128, 3});
  const HostTilePlan mixed_plan = cuda_detail::make_tile_plan(mixed, TileShape{128, 128});
  expect_items_cover_every_row_once(mixed, mixed_plan, TileShape{128, 128});
  ASSERT_EQ(mixed.num_heads(), 3);
  EXPECT_TRUE(mixed_plan.split_rows.empty());
  EXPECT_EQ(mixed_plan.items[0].row, 31);  // the first band: rows of 32..22 tiles of head 0, then of head 1
  EXPECT_EQ(mixed_plan.items[11].row, 32 + 31);
}

// WorkItem::all_full: at least two key tiles below the mask's key length,
// every one full.
TEST(CudaTilePlan, ItemsKnowWhetherEveryTileIsFull) {
  const auto flags = [](const Pattern& pattern, int64_t q_len, int64_t k_len, int64_t block_k) {
    const HostTilePlan plan = cuda_detail::make_tile_plan(
        BlockMask::build(pattern, MaskShape{q_len, k_len, 128, block_k, 1}), TileShape{128, 128});
    std::vector<int32_t> all_full;
    for (const cuda_detail::WorkItem& item : plan.items) all_full.push_back(item.all_full);
    return all_full;
  };
  EXPECT_EQ(flags(Pattern::dense(), 300, 1000, 128), std::vector<int32_t>(3, 1));
  EXPECT_EQ(flags(Pattern::dense(), 300, 100, 128), std::vector<int32_t>(3, 0));  // one key tile
  EXPECT_EQ(flags(Pattern::causal(), 1000, 1000, 128), std::vector<int32_t>(8, 0));  // partial diagonals
  // 256-key blocks over 128-key tiles: 300 keys make three tiles, 100 keys one.
  EXPECT_EQ(flags(Pattern::dense(), 128, 300, 256), std::vector<int32_t>(1, 1));
  EXPECT_EQ(flags(Pattern::dense(), 128, 100, 256), std::vector<int32_t>(1, 0));
  // Blocks smaller than the tile: a derived plan's tiles are full where all their blocks are.
  EXPECT_EQ(flags(Pattern::dense(), 128, 512, 64), std::vector<int32_t>(1, 1));
  EXPECT_EQ(flags(Pattern::block_diagonal(64), 128, 128, 64), std::vector<int32_t>(1, 0));
  // A per-head mix: the dense head's rows, far longer than the average, split
  // into pieces that are all full; the window heads' rows are not.
  const BlockMask mixed = BlockMask::build(
      Pattern::per_head({Pattern::dense(), Pattern::sliding_window(256), Pattern::sliding_window(256),
                         Pattern::sliding_window(256)}),
      MaskShape{8192, 8192, 128, 128, 4});
  const HostTilePlan plan = cuda_detail::make_tile_plan(mixed, TileShape{128, 128});
  ASSERT_EQ(plan.split_rows.size(), 64u);
  for (const cuda_detail::WorkItem& item : plan.items)
    EXPECT_EQ(item.all_full, item.row < 64 ? 1 : 0) << "row " << item.row << " slot " << item.slot;
}

// Every unit number below the count names one (item, copy), each exactly
// once; copy-major units run band after band, copy after copy inside one.
void expect_units_cover_items_and_copies(const HostTilePlan& plan, int64_t batch, int64_t q_heads,
                                         cuda_detail::UnitOrder order) {
  SCOPED_TRACE("unit order " + std::to_string(static_cast<int>(order)));
  cuda_detail::FwdParams p;
  p.batch = batch;
  p.q_heads = q_heads;
  p.kv_heads = 1;
  p.plan.blocks.num_heads = 1;
  p.plan.items = plan.items.data();
  p.plan.num_items = static_cast<int64_t>(plan.items.size());
  p.plan.band_first = plan.band_first.data();
  p.plan.num_bands = static_cast<int64_t>(plan.band_first.size()) - 1;
  const cuda_detail::WorkUnits units(p, order);
  ASSERT_EQ(units.count, p.plan.num_items * batch * q_heads);
  std::vector<int> seen(static_cast<size_t>(units.count), 0);
  int64_t last_band = 0, last_copy = 0;
  for (uint32_t unit = 0; unit < units.count; ++unit) {
    const cuda_detail::UnitPlace place = cuda_detail::locate_unit(p.plan, units, unit);
    ASSERT_LT(place.item, units.items);
    ASSERT_LT(place.copy, units.copies);
    ++seen[place.item * units.copies + place.copy];
    if (order == cuda_detail::UnitOrder::kCopyMajorBanded) {
      const int64_t band = std::upper_bound(plan.band_first.begin(), plan.band_first.end(),
                                            static_cast<int32_t>(place.item)) - plan.band_first.begin() - 1;
      EXPECT_GE(band, last_band);
      EXPECT_TRUE(band > last_band || place.copy >= last_copy) << "unit " << unit;
      last_band = band;
      last_copy = place.copy;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), units.count);
  EXPECT_EQ(cuda_detail::locate_unit(p.plan, units, static_cast<uint32_t>(units.count)).item, cuda_detail::kNoItem);
}

TEST(CudaTilePlan, WorkUnitsNameEveryItemAndCopyOnce) {
  const HostTilePlan plan = cuda_detail::make_tile_plan(
      BlockMask::build(Pattern::causal(), MaskShape{16384, 4096, 128, 128, 1}), TileShape{128, 128});
  for (cuda_detail::UnitOrder order : {cuda_detail::UnitOrder::kItemMajor, cuda_detail::UnitOrder::kCopyMajor,
                                       cuda_detail::UnitOrder::kCopyMajorBanded})
    expect_units_cover_items_and_copies(plan, 3, 5, order);
  HostTilePlan none;  // no items: no units
  none.band_first = {0};
  cuda_detail::FwdParams p;
  p.batch = p.q_heads = p.kv_heads = p.plan.blocks.num_heads = 1;
  p.plan.band_first = none.band_first.data();
  const cuda_detail::WorkUnits units(p, cuda_detail::UnitOrder::kCopyMajorBanded);
  EXPECT_EQ(units.count, 0);
  EXPECT_EQ(cuda_detail::locate_unit(p.plan, units, 0).item, cuda_detail::kNoItem);
}

// The sm90 launch walks its units in a static stride, with no counter to
// zero, only where every item is as long as the others within one entry:
// the pieces of a row split to fill the device, not causal rows, not a
// varlen batch, not items built on the device (lengths unknown).
TEST(CudaTilePlan, StaticStrideOnlyForItemsOfEqualLength) {
  const TileShape tile{128, 128};
  const auto equal = [](const HostTilePlan& host, bool varlen) {
    cuda_detail::FwdParams p;
    p.plan.max_item_entries = host.max_item_entries;
    p.plan.min_item_entries = host.min_item_entries;
    static const int32_t cu_seqlens[2] = {0, 1};  // never read: the launch tests only that it is given
    if (varlen) p.varlen.cu_seqlens_q = cu_seqlens;
    return cuda_detail::items_of_equal_length(p);
  };
  const BlockMask decode = BlockMask::build(Pattern::dense(), MaskShape{1, 16384, 128, 128, 1});
  // 128 tiles in 9 pieces of 14 or 15.
  const HostTilePlan pieces = cuda_detail::make_tile_plan(decode, tile, PlanSplit{9});
  ASSERT_EQ(pieces.items.size(), 9u);
  EXPECT_EQ(pieces.max_item_entries - pieces.min_item_entries, 1);
  EXPECT_TRUE(equal(pieces, false));
  EXPECT_FALSE(equal(pieces, true));
  const HostTilePlan causal = cuda_detail::make_tile_plan(
      BlockMask::build(Pattern::causal(), MaskShape{4096, 4096, 128, 128, 1}), tile);
  EXPECT_EQ(causal.min_item_entries, 1);
  EXPECT_EQ(causal.max_item_entries, 32);
  EXPECT_FALSE(equal(causal, false));
  EXPECT_FALSE(equal(HostTilePlan{}, false));
}

// The order a launch of 132 CTAs over 16 heads of causal rows (bf16, D = 128)
// gets: item-major while every head's keys and values fit in a 50 MB L2,
// banded copy-major while the longest row is more than 1/8 of the work per
// CTA, plain copy-major on longer grids and for items built on the device.
TEST(CudaTilePlan, UnitOrderFollowsL2AndTheGridsTail) {
  using cuda_detail::UnitOrder;
  const auto order = [](int64_t seq) {
    const HostTilePlan host = cuda_detail::make_tile_plan(
        BlockMask::build(Pattern::causal(), MaskShape{seq, seq, 128, 128, 1}), TileShape{128, 128});
    EXPECT_EQ(host.max_item_entries, seq / 128);
    EXPECT_EQ(host.total_item_entries, (seq / 128) * (seq / 128 + 1) / 2);
    cuda_detail::DeviceTilePlanView view;
    view.band_first = host.band_first.data();
    view.num_bands = static_cast<int64_t>(host.band_first.size()) - 1;
    view.max_item_entries = host.max_item_entries;
    view.total_item_entries = host.total_item_entries;
    const int64_t kv_bytes = 2 * 16 * seq * 128 * 2;
    return cuda_detail::choose_unit_order(view, 16, 132, kv_bytes, 50 << 20);
  };
  EXPECT_EQ(order(4096), UnitOrder::kItemMajor);
  EXPECT_EQ(order(8192), UnitOrder::kCopyMajorBanded);   // longest row 64 of 252 entries per CTA
  EXPECT_EQ(order(16384), UnitOrder::kCopyMajorBanded);  // 128 of 1000
  EXPECT_EQ(order(32768), UnitOrder::kCopyMajor);        // 256 of 3987
  cuda_detail::DeviceTilePlanView device_items;          // lengths unknown, no bands
  EXPECT_EQ(cuda_detail::choose_unit_order(device_items, 16, 132, 1 << 30, 50 << 20), UnitOrder::kCopyMajor);
}

// A forced unit order reaches every launch's choice (the GPU suite's
// GpuKernels.EveryUnitOrder relies on it), banded only where the plan has
// bands, and the order forced before comes back.
TEST(CudaTilePlan, ForcedUnitOrderReachesTheLaunchChoice) {
  using cuda_detail::UnitOrder;
  const HostTilePlan plan = cuda_detail::make_tile_plan(
      BlockMask::build(Pattern::causal(), MaskShape{4096, 4096, 128, 128, 1}), TileShape{128, 128});
  cuda_detail::FwdParams p;
  p.batch = p.q_heads = p.kv_heads = p.plan.blocks.num_heads = 1;
  p.k_len = 4096;
  p.plan.items = plan.items.data();
  p.plan.num_items = static_cast<int64_t>(plan.items.size());
  p.plan.band_first = plan.band_first.data();
  p.plan.num_bands = static_cast<int64_t>(plan.band_first.size()) - 1;
  cuda_detail::DeviceInfo h100;
  h100.sms = 132;
  h100.l2_bytes = 50 << 20;  // K and V take 2 MB: unforced, this launch would run item-major
  EXPECT_EQ(cuda_detail::launch_unit_order(p, h100, 132, 128, 2), UnitOrder::kItemMajor);
  for (UnitOrder order : {UnitOrder::kItemMajor, UnitOrder::kCopyMajor, UnitOrder::kCopyMajorBanded}) {
    const ForcedUnitOrder forced(order);
    EXPECT_EQ(cuda_detail::launch_unit_order(p, h100, 132, 128, 2), order);
  }
  cuda_detail::FwdParams no_bands = p;
  no_bands.plan.band_first = nullptr;
  {
    const ForcedUnitOrder outer(UnitOrder::kCopyMajorBanded);
    EXPECT_EQ(cuda_detail::launch_unit_order(no_bands, h100, 132, 128, 2), UnitOrder::kCopyMajor);
    {
      const ForcedUnitOrder inner(UnitOrder::kItemMajor);
      EXPECT_EQ(cuda_detail::launch_unit_order(p, h100, 132, 128, 2), UnitOrder::kItemMajor);
    }
    EXPECT_EQ(cuda_detail::launch_unit_order(p, h100, 132, 128, 2), UnitOrder::kCopyMajorBanded);
  }
  EXPECT_FALSE(cuda_detail::force_unit_order(std::nullopt).has_value());
}

// The K and V bytes the unit order weighs against L2: every kv head's rows
// of every batch element, of the packed batch for varlen, every residue's
// for a pass that reads them in place.
TEST(CudaTilePlan, KvBytesCountEveryRowALaunchReads) {
  cuda_detail::FwdParams p;
  p.batch = 3;
  p.kv_heads = 4;
  p.k_len = 1000;
  EXPECT_EQ(cuda_detail::kv_bytes_read(p, 128, 2), 2 * 3 * 4 * 1000 * 128 * 2);
  p.residue_rate = 4;
  EXPECT_EQ(cuda_detail::kv_bytes_read(p, 64, 2), 2 * 3 * 4 * 1000 * 4 * 64 * 2);
  p.residue_rate = 1;
  const int32_t cu_seqlens[] = {0, 700, 2500};
  p.varlen.cu_seqlens_q = p.varlen.cu_seqlens_k = cu_seqlens;
  p.varlen.total_k = 2500;
  EXPECT_EQ(cuda_detail::kv_bytes_read(p, 128, 2), 2 * 4 * 2500 * 128 * 2);
}

// Every block size on each tile the kernels run: 128 x 64, 128 x 128, the
// sm90 kernel's 64 x 64 and its 192 x 128 tile, whose rows 128- and 256-row
// blocks overlap without nesting (64-row sub-blocks); blocks of 16 x 16
// would split the latter into 96 pieces.
TEST(CudaTilePlan, AgreesWithTheMaskForEveryBlockSize) {
  std::mt19937_64 rng(11);
  for (const TileShape tile : {TileShape{128, 64}, TileShape{128, 128}, TileShape{64, 64}, TileShape{192, 128}})
    for (int64_t bq : {16, 32, 64, 128, 256})
      for (int64_t bk : {16, 32, 64, 128, 256}) {
        const int64_t lq = draw(rng, 1, 700), lk = draw(rng, 1, 600);
        const Case c = random_case(rng, lq, lk, 2);
        const BlockMask mask = BlockMask::build(c.pattern, MaskShape{lq, lk, bq, bk, 2});
        SCOPED_TRACE(c.name + " blocks " + std::to_string(bq) + "x" + std::to_string(bk) + " tile " +
                     std::to_string(tile.rows) + "x" + std::to_string(tile.cols));
        if (tile.rows == 192 && bq == 16 && bk == 16) {
          EXPECT_FALSE(cuda_detail::tile_fits(mask, tile));
          continue;
        }
        ASSERT_TRUE(cuda_detail::tile_fits(mask, tile));
        const HostTilePlan plan = cuda_detail::make_tile_plan(mask, tile);
        EXPECT_EQ(plan.derived != nullptr, bq % tile.rows != 0 || bk % tile.cols != 0);
        EXPECT_EQ(cuda_detail::tile_plan_key_tiles(mask, tile),
                  plan.total_item_entries * (plan.derived ? 1 : bk / tile.cols));
        int64_t mismatches = 0;
        for (int64_t h = 0; h < mask.num_heads(); ++h)
          for (int64_t i = 0; i < lq; ++i)
            for (int64_t j = 0; j < lk; ++j)
              mismatches += plan_allows(mask, plan, tile, h, i, j) != mask.allowed(h, mask.num_heads(), i, j);
        EXPECT_EQ(mismatches, 0);
        expect_items_cover_every_row_once(mask, plan, tile);
      }
}

TEST(CudaTilePlan, RejectsBlocksThatDoNotFitTheTile) {
  const BlockMask mask = BlockMask::build(Pattern::causal(), MaskShape{500, 500, 96, 64, 1});
  try {
    cuda_detail::make_tile_plan(mask, TileShape{128, 64});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_q"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("96"), std::string::npos) << e.what();
  }
}

// The plans of one tile share the mask at its granularity: a fill plan over
// the grain of the plain plan walks the same arrays and covers every row
// once; a grain where the tile walks the mask itself, or none where it needs
// one, is refused with the block and tile sizes; so are row counts of
// another shape.
TEST(CudaTilePlan, PlansOfATileShareItsGrain) {
  const TileShape tile{128, 128};
  const BlockMask bigbird =
      BlockMask::build(Pattern::bigbird(4096, 64, 3, 1, 3, 0), MaskShape{4096, 4096, 64, 64, 2});
  const std::shared_ptr<const cuda_detail::TileGrainMask> grain = cuda_detail::derive_tile_grain_mask(bigbird, tile);
  ASSERT_NE(grain, nullptr);
  const HostTilePlan plain = cuda_detail::make_tile_plan(bigbird, tile);
  const HostTilePlan filled = cuda_detail::make_tile_plan(bigbird, tile, grain, PlanSplit{200});
  EXPECT_EQ(filled.derived, grain);
  EXPECT_EQ(grain->kv_indices, plain.derived->kv_indices);
  EXPECT_EQ(grain->sub_present, plain.derived->sub_present);
  EXPECT_EQ(grain->sub_full, plain.derived->sub_full);
  expect_items_cover_every_row_once(bigbird, filled, tile);
  EXPECT_EQ(cuda_detail::derive_tile_grain_mask(bigbird, TileShape{64, 64}), nullptr);
  expect_error_mentions([&] { cuda_detail::make_tile_plan(bigbird, tile, nullptr, PlanSplit{}); },
                        "needs the mask at tile granularity");
  expect_error_mentions([&] { cuda_detail::make_tile_plan(bigbird, TileShape{64, 64}, grain, PlanSplit{}); },
                        "walks the mask itself");
  // The rows' counts, where a caller has them, give the same grain; counts of another shape are refused.
  const std::vector<int64_t> counts = cuda_detail::tile_grain_row_counts(bigbird, tile);
  EXPECT_EQ(static_cast<int64_t>(counts.size()), static_cast<int64_t>(grain->row_offsets.size()) - 1);
  EXPECT_EQ(cuda_detail::derive_tile_grain_mask(bigbird, tile, counts)->kv_indices, grain->kv_indices);
  EXPECT_EQ(cuda_detail::tile_plan_key_tiles(bigbird, tile, counts), grain->row_offsets.back());
  EXPECT_TRUE(cuda_detail::tile_grain_row_counts(bigbird, TileShape{64, 64}).empty());
  expect_error_mentions([&] { cuda_detail::derive_tile_grain_mask(bigbird, tile, std::vector<int64_t>(3, 1)); },
                        "3 row counts given");
}

// Every pair of the mask is computed by exactly one pass of its dilated split:
// the permuted pass (the chosen term's pairs in regular segments outside the
// rest's full runs, found again through the permuted block-diagonal mask) or
// the rest (its full blocks whole, its partial blocks less the term's regular
// pairs). Checked for the split of each kernel tile (sm80 128 x 64, sm90
// 128 x 128), whose full runs differ.
void expect_split_partitions_the_mask(const Pattern& pattern, int64_t lq, int64_t lk, int64_t heads, int64_t block,
                                      TileShape tile) {
  SCOPED_TRACE(pattern.describe() + " Lq " + std::to_string(lq) + " Lk " + std::to_string(lk) + " block " +
               std::to_string(block) + " tile " + std::to_string(tile.rows) + "x" + std::to_string(tile.cols));
  const BlockMask mask = BlockMask::build(pattern, MaskShape{lq, lk, block, block, heads});
  const auto split = cuda_detail::make_dilated_split(mask, tile);
  ASSERT_NE(split, nullptr);
  const int64_t w = split->segment, r = split->rate, shift = lk - lq;
  const int64_t p_hi = split->first_position + split->num_segments * w;
  int64_t permuted_pairs = 0, run_pairs = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      const BlockMaskView rest_view = split->rest.view();
      const int32_t* run = &split->full_runs[2 * rest_view.row(rest_view.mask_head(h, heads), i / block)];
      for (int64_t j = 0; j < lk; ++j) {
        const int64_t p = i + shift;
        const bool regular = p >= split->first_position && p < p_hi && p / w == j / w;
        const bool in_term = regular && p % r == h % r && j % r == h % r && (!split->causal || j <= p);
        const bool in_run = j >= run[0] && j < run[1];
        const bool permuted = in_term && !in_run;
        if (permuted) {  // its place in the permuted sequence
          const int64_t base = (p / w - split->first_position / w) * split->group;
          EXPECT_TRUE(split->permuted.allowed(0, 1, base + (p % w) / r, base + (j % w) / r));
          ++permuted_pairs;
        }
        run_pairs += in_term && in_run;
        const bool rest = (!in_term || in_run) && split->rest.allowed(h, heads, i, j);
        ASSERT_EQ(mask.allowed(h, heads, i, j), permuted || rest) << "h " << h << " i " << i << " j " << j;
      }
    }
  EXPECT_EQ(split->permuted.kept_pairs(1) * heads, permuted_pairs + run_pairs);
  EXPECT_LE(split->rest.num_blocks(), mask.num_blocks());
}

void expect_split_partitions_the_mask(const Pattern& pattern, int64_t lq, int64_t lk, int64_t heads, int64_t block) {
  for (const TileShape tile : {TileShape{128, 64}, TileShape{128, 128}})
    expect_split_partitions_the_mask(pattern, lq, lk, heads, block, tile);
}

TEST(CudaDilatedSplit, PartitionsEveryPairOnce) {
  const Pattern bench = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  expect_split_partitions_the_mask(bench, 1024, 1024, 4, 128);
  expect_split_partitions_the_mask(bench, 1024, 1024, 4, 64);   // no full runs (blocks below the tile)
  expect_split_partitions_the_mask(bench, 1000, 1000, 5, 32);   // ragged last segment, 5 heads
  expect_split_partitions_the_mask(bench, 700, 1100, 4, 128);   // Lq < Lk: ragged first segment
  expect_split_partitions_the_mask(bench, 1100, 700, 4, 128);   // Lq > Lk: rows before position 0
  expect_split_partitions_the_mask(Pattern::unite(Pattern::dilated({512}, {4}, true), Pattern::causal()), 1500,
                                   1500, 4, 128);
  expect_split_partitions_the_mask(Pattern::dilated({128, 512}, {2, 4}, false), 900, 900, 4, 64);
  expect_split_partitions_the_mask(
      Pattern::unite(Pattern::dilated({512}, {8}, false), Pattern::streaming(16, 100)), 777, 777, 8, 16);
}

// The permuted pass merges its rows into the rest's as it writes them, which
// the pieces of a split row cannot (a call whose permuted plan split a row
// would run without the permutation). Causal groups come nearest to a split,
// their last rows seeing twice the keys of the average row: long groups
// (32768 tokens) and groups that straddle the kernel tile (4100 tokens) get
// a split whose permuted plan splits no row, on both 128-row tiles.
TEST(CudaDilatedSplit, PermutedPlansSplitNoRow) {
  for (const TileShape tile : {TileShape{128, 64}, TileShape{128, 128}}) {
    for (const auto& [segment, rate, length] :
         {std::tuple<int64_t, int64_t, int64_t>{65536, 2, 131072}, {8200, 2, 32800}}) {
      const BlockMask mask = BlockMask::build(Pattern::dilated({segment}, {rate}, true),
                                              MaskShape{length, length, 128, 128, 2});
      const auto split = cuda_detail::make_dilated_split(mask, tile);
      ASSERT_NE(split, nullptr) << "segment " << segment << ", tile " << tile.rows << " x " << tile.cols;
      EXPECT_TRUE(cuda_detail::make_tile_plan(split->permuted, tile).split_rows.empty())
          << "segment " << segment << ", tile " << tile.rows << " x " << tile.cols;
    }
  }
}

// A one-branch dilated pattern on whole segments leaves the rest no block
// (its permuted pass then writes without reading the rest's rows,
// FwdParams::rest_keeps_blocks); a ragged last segment gives it some.
TEST(CudaDilatedSplit, OneBranchOnWholeSegmentsLeavesTheRestEmpty) {
  const TileShape tile{128, 128};
  const auto whole = cuda_detail::make_dilated_split(
      BlockMask::build(Pattern::dilated({256}, {4}, true), MaskShape{1024, 1024, 128, 128, 4}), tile);
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->rest.num_blocks(), 0);
  const auto ragged = cuda_detail::make_dilated_split(
      BlockMask::build(Pattern::dilated({256}, {4}, true), MaskShape{1100, 1100, 128, 128, 4}), tile);
  ASSERT_NE(ragged, nullptr);
  EXPECT_GT(ragged->rest.num_blocks(), 0);
}

// The rest keeps one mask head where its heads are alike (blocks larger than
// the rate), and one per head where they differ (a ragged last segment whose
// 16-key blocks hold 16 of the 32 residues: heads 0 and 16 keep other blocks).
TEST(CudaDilatedSplit, RestSharesOneMaskHeadWhereHeadsAreAlike) {
  const Pattern bench = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  const auto alike = cuda_detail::make_dilated_split(BlockMask::build(bench, MaskShape{1024, 1024, 128, 128, 4}),
                                                     TileShape{128, 128});
  ASSERT_NE(alike, nullptr);
  EXPECT_EQ(alike->rest.num_heads(), 1);
  EXPECT_EQ(alike->full_runs.size(), static_cast<size_t>(2 * alike->rest.num_q_blocks()));
  EXPECT_FALSE(cuda_detail::permuted_exclusion(*alike, 1024, 1024, alike->full_runs.data()).runs_per_head);

  const Pattern wide = Pattern::unite(Pattern::dilated({2048}, {32}, true), Pattern::sliding_window(64));
  const BlockMask per_head = BlockMask::build(wide, MaskShape{2304, 2304, 16, 16, 17});
  const auto differ = cuda_detail::make_dilated_split(per_head, TileShape{128, 64});
  ASSERT_NE(differ, nullptr);
  EXPECT_EQ(differ->rest.num_heads(), 17);
  EXPECT_TRUE(cuda_detail::permuted_exclusion(*differ, 2304, 2304, differ->full_runs.data()).runs_per_head);
  // 16-key blocks: no full runs for either tile, one tile shape suffices.
  expect_split_partitions_the_mask(wide, 2304, 2304, 17, 16, TileShape{128, 64});
}

// A mask made from arrays gets the split only where its blocks are the
// pattern's plan (checked against BlockMask::build, which a built mask skips).
TEST(CudaDilatedSplit, MasksFromArraysOnlyWhereTheyHoldThePatternsPlan) {
  const auto pattern = std::make_shared<Pattern>(
      Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64)));
  const BlockMask built = BlockMask::build(*pattern, MaskShape{1024, 1024, 128, 128, 4});
  const TileShape tile{128, 128};
  const BlockMask same(1024, 1024, 128, 128, built.num_heads(), built.row_offsets(), built.kv_indices(),
                       built.kv_full(), pattern);
  const auto from_built = cuda_detail::make_dilated_split(built, tile);
  const auto from_arrays = cuda_detail::make_dilated_split(same, tile);
  ASSERT_NE(from_built, nullptr);
  ASSERT_NE(from_arrays, nullptr);
  EXPECT_EQ(from_arrays->rest.kv_indices(), from_built->rest.kv_indices());
  EXPECT_EQ(from_arrays->full_runs, from_built->full_runs);

  // One block of head 0's first row dropped: no longer the pattern's plan.
  std::vector<int64_t> offsets = built.row_offsets();
  std::vector<int32_t> indices = built.kv_indices();
  std::vector<uint8_t> full = built.kv_full();
  ASSERT_GT(offsets[1], 0);
  indices.erase(indices.begin());
  full.erase(full.begin());
  for (size_t r = 1; r < offsets.size(); ++r) --offsets[r];
  const BlockMask fewer(1024, 1024, 128, 128, built.num_heads(), std::move(offsets), std::move(indices),
                        std::move(full), pattern);
  EXPECT_EQ(cuda_detail::make_dilated_split(fewer, tile), nullptr);
}

// Whether the kernel's exclusion (excluded_keys over x) takes key j out of row i.
bool excludes(const cuda_detail::DilatedExclusion& x, int64_t h, int64_t i, int64_t j, int64_t shift) {
  cuda_detail::KeySpan keys;
  return cuda_detail::excluded_keys(x, h, pattern_math::positive_mod(h, x.rate), i, shift, keys) && j >= keys.lo &&
         j <= keys.hi && pattern_math::positive_mod(j - keys.residue, keys.stride) == 0;
}

// Whether the block of (i, j) in query head h's rows of `mask` (of `heads`
// query heads) is kept and full.
bool block_full(const BlockMask& mask, int64_t h, int64_t heads, int64_t i, int64_t j) {
  const BlockMaskView v = mask.view();
  const int64_t r = v.row(v.mask_head(h, heads), i / mask.block_q());
  for (int64_t e = v.row_begin(r); e < v.row_end(r); ++e)
    if (mask.kv_indices()[e] == j / mask.block_k()) return mask.kv_full()[e] != 0;
  return false;
}

// The pairs the two passes compute with the exclusions the CUDA backend
// passes them (rest_exclusion, permuted_exclusion) and the kernels' per-row
// formula (excluded_keys): the rest pass every pair its mask allows, less the
// excluded keys on partial blocks; the permuted pass every pair of its
// block-diagonal mask, less the excluded keys. Every pair of the pattern comes
// out exactly once, and no other.
void expect_passes_compute_each_pair_once(const Pattern& pattern, int64_t lq, int64_t lk, int64_t heads,
                                          int64_t block, TileShape tile) {
  SCOPED_TRACE(pattern.describe() + " Lq " + std::to_string(lq) + " Lk " + std::to_string(lk) + " block " +
               std::to_string(block) + " tile " + std::to_string(tile.rows) + "x" + std::to_string(tile.cols));
  const BlockMask mask = BlockMask::build(pattern, MaskShape{lq, lk, block, block, heads});
  const auto split = cuda_detail::make_dilated_split(mask, tile);
  ASSERT_NE(split, nullptr);
  const cuda_detail::DilatedExclusion rest = cuda_detail::rest_exclusion(*split);
  const cuda_detail::DilatedExclusion permuted =
      cuda_detail::permuted_exclusion(*split, lq, lk, split->full_runs.data());
  const int64_t shift = lk - lq, n = split->num_segments * split->group, r = split->rate;
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<uint8_t> computed(static_cast<size_t>(lq * lk), 0);
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = 0; j < lk; ++j)
        computed[i * lk + j] = split->rest.allowed(h, heads, i, j) &&
                               (block_full(split->rest, h, heads, i, j) || !excludes(rest, h, i, j, shift));
    // Permuted row a of group g: position first_position + g w + h % r + a r.
    auto position = [&](int64_t row) {
      return split->first_position + row / split->group * split->segment + h % r + row % split->group * r;
    };
    for (int64_t row = 0; row < n; ++row)
      for (int64_t key = 0; key < n; ++key)
        if (split->permuted.allowed(0, 1, row, key) && !excludes(permuted, h, row, key, 0))
          ++computed[(position(row) - shift) * lk + position(key)];
    for (int64_t i = 0; i < lq; ++i)
      for (int64_t j = 0; j < lk; ++j)
        ASSERT_EQ(static_cast<int>(computed[i * lk + j]), mask.allowed(h, heads, i, j) ? 1 : 0)
            << "h " << h << " i " << i << " j " << j;
  }
}

TEST(CudaDilatedSplit, PassesComputeEachPairOnce) {
  const Pattern bench = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  const Pattern offset = Pattern::unite(Pattern::dilated({288}, {4}, true), Pattern::sliding_window(256));
  for (const TileShape tile : {TileShape{128, 64}, TileShape{128, 128}}) {
    expect_passes_compute_each_pair_once(bench, 1024, 1024, 4, 128, tile);
    expect_passes_compute_each_pair_once(bench, 1000, 1000, 5, 32, tile);  // ragged last segment, no full runs
    expect_passes_compute_each_pair_once(bench, 700, 1100, 4, 128, tile);  // Lq < Lk
    expect_passes_compute_each_pair_once(bench, 1100, 700, 4, 128, tile);  // Lq > Lk
    // First regular segment at 288, not a multiple of the blocks, with full runs.
    expect_passes_compute_each_pair_once(offset, 744, 1000, 4, 128, tile);
    expect_passes_compute_each_pair_once(offset, 1000, 744, 4, 128, tile);
    expect_passes_compute_each_pair_once(Pattern::unite(Pattern::dilated({512}, {4}, true), Pattern::causal()), 1500,
                                         1500, 4, 128, tile);
  }
}

// In a regular row the rest pass's predicate may leave the split's dilated
// term out: after the exclusion the row keeps the same keys (every pair of
// the term there is excluded).
TEST(CudaDilatedSplit, RegularRestRowsMayLeaveTheDilatedTermOut) {
  const std::vector<std::pair<Pattern, std::pair<int64_t, int64_t>>> cases = {
      {Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64)), {1024, 1024}},
      {Pattern::unite(Pattern::dilated({288}, {4}, true), Pattern::sliding_window(256)), {744, 1000}},
      {Pattern::unite(Pattern::dilated({512}, {4}, false), Pattern::causal()), {1100, 900}},
      {Pattern::dilated({128, 512}, {2, 4}, true), {900, 900}},
  };
  int64_t rows_checked = 0, words_without_the_term = 0;
  for (const auto& [pattern, lengths] : cases) {
    const auto [lq, lk] = lengths;
    SCOPED_TRACE(pattern.describe());
    const int64_t heads = 4, shift = lk - lq;
    const BlockMask mask = BlockMask::build(pattern, MaskShape{lq, lk, 128, 128, heads});
    const auto split = cuda_detail::make_dilated_split(mask, TileShape{128, 128});
    ASSERT_NE(split, nullptr);
    const cuda_detail::DilatedExclusion rest = cuda_detail::rest_exclusion(*split);
    ASSERT_GE(rest.term, 0);
    EXPECT_EQ(rest.term_left_out(rest.p_lo, rest.p_hi), rest.term);
    EXPECT_EQ(rest.term_left_out(rest.p_lo - 1, rest.p_hi), -1);
    EXPECT_EQ(rest.term_left_out(rest.p_lo, rest.p_hi + 1), -1);
    const PatternExpr& e = pattern.exprs()[0];
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t pos = rest.p_lo; pos < rest.p_hi; ++pos) {
        const int64_t i = pos - shift;
        if (i < 0 || i >= lq) continue;
        ++rows_checked;
        cuda_detail::KeySpan keys;
        const bool has_excl =
            cuda_detail::excluded_keys(rest, h, pattern_math::positive_mod(h, rest.rate), i, shift, keys);
        for (int64_t k0 = 0; k0 < lk; k0 += 64) {
          uint64_t whole = 0, without = 0;
          ASSERT_TRUE(cuda_detail::expr_row_word(e, h, i, pos, k0, whole));
          ASSERT_TRUE(cuda_detail::expr_row_word(e, h, i, pos, k0, without, rest.term_left_out(pos, pos + 1)));
          const uint64_t excluded =
              has_excl ? pattern_math::span_word(keys.lo, keys.hi, keys.stride, keys.residue, k0) : 0;
          ASSERT_EQ(whole & ~excluded, without & ~excluded) << "h " << h << " position " << pos << " k0 " << k0;
          words_without_the_term += whole != without ? 1 : 0;
        }
      }
  }
  EXPECT_GT(rows_checked, 1000);
  EXPECT_GT(words_without_the_term, 0);  // leaving the term out did change words (their excluded keys)
}

// Full runs exist only where the kernel walks the mask's own blocks (blocks
// multiples of its tile): 128 x 64 blocks have them for the sm80 tile, not for
// the sm90 one; 128 x 128 blocks for both.
TEST(CudaDilatedSplit, FullRunsFollowTheKernelTile) {
  const Pattern with_causal = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::causal());
  auto has_runs = [&](int64_t block_k, TileShape tile) {
    const auto split =
        cuda_detail::make_dilated_split(BlockMask::build(with_causal, MaskShape{1024, 1024, 128, block_k, 4}), tile);
    EXPECT_NE(split, nullptr);
    if (!split) return false;
    for (size_t n = 0; n < split->full_runs.size(); n += 2)
      if (split->full_runs[n] != split->full_runs[n + 1]) return true;
    return false;
  };
  EXPECT_TRUE(has_runs(64, TileShape{128, 64}));
  EXPECT_FALSE(has_runs(64, TileShape{128, 128}));
  EXPECT_TRUE(has_runs(128, TileShape{128, 64}));
  EXPECT_TRUE(has_runs(128, TileShape{128, 128}));
}

TEST(CudaDilatedSplit, OnlyWhereThePermutationIsExact) {
  auto split_of = [](const Pattern& pattern, int64_t block) {
    return cuda_detail::make_dilated_split(BlockMask::build(pattern, MaskShape{1024, 1024, block, block, 4}),
                                           TileShape{128, 64});
  };
  EXPECT_EQ(split_of(Pattern::causal(), 128), nullptr);
  EXPECT_EQ(split_of(Pattern::dilated({300}, {7}), 128), nullptr);  // 300 % 7 != 0
  EXPECT_EQ(split_of(Pattern::dilated({128}, {4}), 128), nullptr);  // groups of 32
  EXPECT_EQ(split_of(Pattern::dilated({2048}, {4}), 128), nullptr);  // no whole segment
  EXPECT_EQ(split_of(Pattern::unite(Pattern::dilated({256}, {2}), Pattern::longformer(64, {0})), 64), nullptr);
  EXPECT_EQ(split_of(Pattern::intersect(Pattern::dilated({256}, {2}), Pattern::sliding_window(64)), 64), nullptr);
  EXPECT_NE(split_of(Pattern::dilated({256}, {2}), 64), nullptr);
  // A mask that is not the pattern's whole plan keeps its own blocks.
  const BlockMask whole = BlockMask::build(Pattern::dilated({256}, {2}), MaskShape{1024, 1024, 128, 128, 4});
  std::vector<int64_t> offsets = whole.row_offsets();
  std::vector<int32_t> indices = whole.kv_indices();
  std::vector<uint8_t> full = whole.kv_full();
  indices.pop_back();
  full.pop_back();
  offsets.back() -= 1;
  const BlockMask part(1024, 1024, 128, 128, 4, offsets, indices, full,
                       std::make_shared<Pattern>(Pattern::dilated({256}, {2})));
  EXPECT_EQ(cuda_detail::make_dilated_split(part, TileShape{128, 64}), nullptr);
}

// The table of keep bits numbers the partial entries in order.
TEST(CudaKeepBitsTable, PartialEntriesNumberedInOrder) {
  EXPECT_EQ(cuda_detail::partial_entry_slots({1, 0, 0, 1, 0}), (std::vector<int32_t>{-1, 0, 1, -1, 2}));
  EXPECT_EQ(cuda_detail::partial_entry_slots({1, 1}), (std::vector<int32_t>{-1, -1}));
  EXPECT_TRUE(cuda_detail::partial_entry_slots({}).empty());
}

// The table's head classes tell apart exactly the heads of a mask head whose bits may differ.
TEST(CudaKeepBitsTable, HeadClassesTellApartHeadsWhoseBitsDiffer) {
  const auto classes = [](const BlockMask& mask, int64_t q_heads, cuda_detail::DilatedExclusion exclude = {}) {
    cuda_detail::FwdParams p;
    p.q_heads = q_heads;
    p.exclude = exclude;
    return cuda_detail::keep_bit_classes(p, mask);
  };
  const BlockMask shared = BlockMask::build(Pattern::sliding_window(100), MaskShape{1024, 1024, 128, 128, 1});
  EXPECT_EQ(classes(shared, 8), 1);
  const BlockMask per_head =
      BlockMask::build(Pattern::dilated({256}, {4}, true), MaskShape{1024, 1024, 128, 128, 8});
  EXPECT_EQ(classes(per_head, 8), 1);  // one query head per mask head
  const BlockMask dilated_shared =
      BlockMask::build(Pattern::dilated({256}, {4}, true), MaskShape{1024, 1024, 128, 128, 2});
  EXPECT_EQ(classes(dilated_shared, 8), 4);  // h % 4 of the 4 heads per mask head
  EXPECT_EQ(classes(dilated_shared, 6), 3);  // rate 4 does not divide 3 heads per mask head

  const Pattern bench = Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64));
  const auto split = cuda_detail::make_dilated_split(BlockMask::build(bench, MaskShape{1024, 1024, 128, 128, 8}),
                                                     TileShape{128, 128});
  ASSERT_NE(split, nullptr);
  ASSERT_EQ(split->rest.num_heads(), 1);
  EXPECT_EQ(classes(split->rest, 8, cuda_detail::rest_exclusion(*split)), 4);
  cuda_detail::DilatedExclusion runs = cuda_detail::permuted_exclusion(*split, 1024, 1024, split->full_runs.data());
  EXPECT_EQ(classes(split->permuted, 8, runs), 4);
  runs.runs_per_head = true;
  EXPECT_EQ(classes(split->permuted, 8, runs), 8 / split->permuted.num_heads());

  cuda_detail::FwdParams varlen;
  varlen.q_heads = 8;
  const int32_t cu_seqlens[2] = {0, 1024};
  varlen.varlen.cu_seqlens_q = cu_seqlens;
  EXPECT_EQ(cuda_detail::keep_bit_classes(varlen, shared), 0);
  cuda_detail::FwdParams packed;
  packed.q_heads = 2;
  packed.packed.heads = 4;
  EXPECT_EQ(cuda_detail::keep_bit_classes(packed, shared), 0);
}

// The word of a row (bit k: key k0 + k) holds exactly the keys the
// predicate allows, for every pattern with a span form.
TEST(CudaRowKeyBits, SpanFormAgreesWithThePredicate) {
  std::mt19937_64 rng(12);
  int64_t rows_with_span_form = 0, custom_rows = 0;
  for (int n = 0; n < 300; ++n) {
    const int64_t lq = draw(rng, 1, 900), lk = draw(rng, 1, 900), heads = 4;
    const Case c = random_case(rng, lq, lk, heads);
    SCOPED_TRACE(c.name);
    for (int r = 0; r < 20; ++r) {
      const int64_t h = draw(rng, 0, heads - 1), i = draw(rng, 0, lq - 1), p = i + lk - lq;
      const int64_t k0 = draw(rng, 0, (lk - 1) / 64) * 64;
      const PatternExpr& e = c.pattern.expr_for_head(h, heads);
      uint64_t word = 0;
      if (!cuda_detail::expr_row_word(e, h, i, p, k0, word)) continue;
      ++rows_with_span_form;
      for (int32_t t = 0; t < e.num_terms; ++t) custom_rows += e.terms[t].kind == TermKind::Custom ? 1 : 0;
      for (int k = 0; k < 64; ++k)
        ASSERT_EQ(((word >> k) & 1) != 0, expr_allows(e, h, i, p, k0 + k))
            << "h " << h << " i " << i << " p " << p << " j " << k0 + k;
    }
  }
  EXPECT_GT(rows_with_span_form, 1000);
  EXPECT_GT(custom_rows, 100);  // custom block masks (block sizes 1..40, causal or not) have one too
}

// Every stride and offset of a span, against a key-by-key test.
TEST(CudaRowKeyBits, SpanWordMatchesItsDefinition) {
  for (const int64_t stride : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{8}, int64_t{16},
                               int64_t{31}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{200}})
    for (const int64_t k0 : {int64_t{0}, int64_t{64}, int64_t{1} << 40})
      for (int64_t lo = k0 - 70; lo <= k0 + 70; lo += 7)
        for (int64_t hi = lo - 1; hi <= k0 + 140; hi += 11)
          for (int64_t residue = 0; residue < stride && residue < 70; residue += 3) {
            const uint64_t word = pattern_math::span_word(lo, hi, stride, residue, k0);
            for (int k = 0; k < 64; ++k) {
              const int64_t j = k0 + k;
              const bool in = j >= lo && j <= hi && pattern_math::positive_mod(j - residue, stride) == 0;
              ASSERT_EQ(((word >> k) & 1) != 0, in)
                  << "lo " << lo << " hi " << hi << " stride " << stride << " residue " << residue << " j " << j;
            }
          }
}

// A thread's columns of a row: bit 2 n + c is key 8 n + first_col + c.
TEST(CudaRowKeyBits, ThreadColumnsPickTheThreadsKeys) {
  std::mt19937_64 rng(14);
  for (int n = 0; n < 200; ++n) {
    const uint64_t keys = rng();
    for (int first_col = 0; first_col < 8; first_col += 2) {
      const uint32_t bits = cuda_detail::thread_columns(keys, first_col);
      for (int k = 0; k < 32; ++k) {
        const int key = (k / 2) * 8 + (k % 2) + first_col;
        ASSERT_EQ((bits >> k) & 1, k < 16 ? (keys >> key) & 1 : 0) << "first_col " << first_col << " k " << k;
      }
    }
  }
}

TEST(CudaRowKeyBits, DivisionShortcutsAgreeWithPlainDivision) {
  const int64_t big = int64_t{1} << 40;
  for (int64_t m = 1; m <= 40; ++m)
    for (const int64_t base : {int64_t{0}, big, -big})
      for (int64_t x = base - 300; x <= base + 300; ++x) {
        const int64_t r = x % m;
        ASSERT_EQ(pattern_math::positive_mod(x, m), r < 0 ? r + m : r) << x << " mod " << m;
        if (x >= 0) {
          ASSERT_EQ(pattern_math::nonnegative_div(x, m), x / m) << x << " / " << m;
        }
      }
}

// A small problem on the device with its own buffers.
struct SmallProblem {
  BlockMask mask = BlockMask::build(Pattern::streaming(8, 100), MaskShape{300, 300, 64, 64, 2});
  HostTensor q{DType::BF16, 1, 2, 300, 64}, k{DType::BF16, 1, 2, 300, 64}, v{DType::BF16, 1, 2, 300, 64};
  HostTensor out{DType::BF16, 1, 2, 300, 64};
  SmallProblem() {
    std::mt19937_64 rng(5);
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
  }
};

TEST(CudaBackend, RejectsUnsupportedInputsNamingTheValue) {
  SPATTN_REQUIRE_GPU();
  SmallProblem p;
  DeviceTensor dq(p.q), dk(p.k), dv(p.v), dout(p.out);
  // Head dim 80 is not built.
  HostTensor q80(DType::BF16, 1, 2, 300, 80), k80(DType::BF16, 1, 2, 300, 80), v80(DType::BF16, 1, 2, 300, 80);
  DeviceTensor dq80(q80), dk80(k80), dv80(v80), dout80(q80);
  expect_error_mentions([&] { cuda_attention(dq80.view(), dk80.view(), dv80.view(), dout80.view(), p.mask, 0.1); },
                        "80");
  // Host pointers.
  expect_error_mentions([&] { cuda_attention(p.q.view, p.k.view, p.v.view, p.out.view, p.mask, 0.1); },
                        "device memory");
  // fp32 inputs.
  HostTensor q32(DType::F32, 1, 2, 300, 64);
  DeviceTensor dq32(q32), dk32(q32), dv32(q32), dout32(q32);
  expect_error_mentions([&] { cuda_attention(dq32.view(), dk32.view(), dv32.view(), dout32.view(), p.mask, 0.1); },
                        "fp32");
  expect_error_mentions([&] { cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), p.mask, -1.0); },
                        "-1");
}

// The shape of a captured call: q_len queries (the last positions) over
// k_len keys, q_heads over kv_heads.
struct CaptureShape {
  int64_t q_len, k_len, q_heads, kv_heads;
};

// The plan of calls of `tensors`' shape on `mask` on the current device.
Plan device_plan(const BlockMask& mask, const TensorView& q, const TensorView& k) {
  PlanOptions options;
  options.device = cuda_pointer_device(q.data);
  return make_plan(mask, call_shape(q, k), options);
}

// The kernel tile the planner takes for a call on `mask`.
TileShape planner_tile(bool sm90, int64_t head_dim, const BlockMask& mask, bool dilated_splits, bool packed = false) {
  cuda_detail::MaskFacts facts(mask);
  return cuda_detail::call_tile(sm90, head_dim, facts, dilated_splits, packed);
}

// Makes the call's plan, captures one attention call on it in a graph,
// replays it on poisoned output and compares with the reference.
void expect_graph_replay_matches(const Pattern& pattern, const CaptureShape& c) {
  const BlockMask mask = BlockMask::build(pattern, MaskShape{c.q_len, c.k_len, 64, 64, c.q_heads});
  HostTensor q(DType::BF16, 1, c.q_heads, c.q_len, 64), k(DType::BF16, 1, c.kv_heads, c.k_len, 64),
      v(DType::BF16, 1, c.kv_heads, c.k_len, 64);
  std::mt19937_64 rng(6);
  q.fill_random(rng);
  k.fill_random(rng);
  v.fill_random(rng);
  HostTensor got(DType::BF16, 1, c.q_heads, c.q_len, 64), ref(DType::F64, 1, c.q_heads, c.q_len, 64);
  DeviceTensor dq(q), dk(k), dv(v), dout(got);
  const Plan plan = device_plan(mask, dq.view(), dk.view());
  replay_captured(
      [&](cudaStream_t stream) {
        AttentionOptions options;
        options.scale = 0.125;
        options.stream = stream;
        attention(dq.view(), dk.view(), dv.view(), dout.view(), plan, options);
      },
      [&] { dout.poison(); });
  dout.copy_to(got);
  reference_attention(q.view, k.view, v.view, ref.view, mask, 0.125, nullptr);
  EXPECT_LT(relative_error(got.to_double(), ref.to_double()), out_tolerance(DType::BF16)) << plan.describe();
}

TEST(CudaBackend, AttentionCallCapturedInAGraph) {
  SPATTN_REQUIRE_GPU();
  expect_graph_replay_matches(Pattern::streaming(8, 100), {300, 300, 2, 2});
  // With split rows: the scratch allocation and the merge are captured too.
  expect_graph_replay_matches(Pattern::longformer(64, {0}), {2200, 2200, 1, 1});
  // A dilated split without a caller's LSE: two passes, the second merging
  // into out and the LSE in scratch; both read the tables of keep bits made
  // with the plan.
  expect_graph_replay_matches(Pattern::unite(Pattern::dilated({256}, {4}, true), Pattern::sliding_window(64)),
                              {1000, 1000, 4, 4});
  // A decoding step, its query heads packed (four to a kv head) and its rows
  // split to fill the device.
  expect_graph_replay_matches(Pattern::sliding_window(3000), {1, 9000, 8, 2});
  // Four query positions of those heads: the copies into packed rows and back are captured too.
  expect_graph_replay_matches(Pattern::causal(), {4, 9000, 8, 2});
  // Dense over 1152 tokens: on an sm90 device the call takes the tall tile on
  // its own (six 192-row tiles, as much work as nine of 128 rows).
  EXPECT_EQ(planner_tile(true, 64, BlockMask::build(Pattern::dense(), MaskShape{1152, 1152, 64, 64, 2}), true).rows, 192);
  expect_graph_replay_matches(Pattern::dense(), {1152, 1152, 2, 2});
}

// A call that passes the mask takes its plan from the mask's cache: the
// shape's first call makes it, a captured call of that shape finds it.
TEST(CudaBackend, CachedPlanCapturedAfterTheShapesFirstCall) {
  SPATTN_REQUIRE_GPU();
  SmallProblem p;
  DeviceTensor dq(p.q), dk(p.k), dv(p.v), dout(p.out);
  cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), p.mask, 0.125);
  cuda_ok(cudaDeviceSynchronize(), "first call");
  const int64_t plans = p.mask.plan_cache().size();
  EXPECT_GE(plans, 1);
  replay_captured(
      [&](cudaStream_t stream) {
        cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), p.mask, 0.125, nullptr, stream);
      },
      [&] { dout.poison(); });
  EXPECT_EQ(p.mask.plan_cache().size(), plans);
  HostTensor got(DType::BF16, 1, 2, 300, 64), ref(DType::F64, 1, 2, 300, 64);
  dout.copy_to(got);
  reference_attention(p.q.view, p.k.view, p.v.view, ref.view, p.mask, 0.125, nullptr);
  EXPECT_LT(relative_error(got.to_double(), ref.to_double()), out_tolerance(DType::BF16));
}

// A mask whose tiles are masked: each plan makes its own table of keep bits
// (per head count: the heads' classes differ) before it is returned, and
// every call on it, captured or not, reads that table and matches the
// reference.
TEST(CudaBackend, KeepBitsTableMadeWithThePlan) {
  SPATTN_REQUIRE_GPU();
  const BlockMask mask = BlockMask::build(Pattern::sliding_window(100), MaskShape{1000, 1000, 64, 64, 2});
  std::vector<const uint32_t*> tables;
  for (const int64_t q_heads : {2, 4}) {
    HostTensor q(DType::BF16, 1, q_heads, 1000, 64), k(DType::BF16, 1, 2, 1000, 64), v(DType::BF16, 1, 2, 1000, 64);
    std::mt19937_64 rng(static_cast<uint64_t>(q_heads));
    q.fill_random(rng);
    k.fill_random(rng);
    v.fill_random(rng);
    HostTensor got(DType::BF16, 1, q_heads, 1000, 64), ref(DType::F64, 1, q_heads, 1000, 64);
    DeviceTensor dq(q), dk(k), dv(v), dout(got);
    const Plan plan = device_plan(mask, dq.view(), dk.view());
    const cuda_detail::CudaPlan& cuda_plan = *plan.state().cuda;
    ASSERT_EQ(cuda_plan.passes.size(), 1u);
    ASSERT_NE(cuda_plan.passes[0].keep_bits.words, nullptr) << plan.describe();
    tables.push_back(cuda_plan.passes[0].keep_bits.words);
    for (const bool captured : {false, true}) {
      const auto call = [&](cudaStream_t stream) {
        AttentionOptions options;
        options.scale = 0.125;
        options.stream = stream;
        attention(dq.view(), dk.view(), dv.view(), dout.view(), plan, options);
      };
      if (captured) {
        replay_captured(call, [&] { dout.poison(); });
      } else {
        TestStream s;
        dout.poison();
        call(s.stream);
        cuda_ok(cudaStreamSynchronize(s.stream), "attention call");
      }
      dout.copy_to(got);
      reference_attention(q.view, k.view, v.view, ref.view, mask, 0.125, nullptr);
      EXPECT_LT(relative_error(got.to_double(), ref.to_double()), out_tolerance(DType::BF16))
          << q_heads << " heads" << (captured ? ", captured" : "");
    }
  }
  EXPECT_NE(tables[0], tables[1]);
}

TEST(CudaBackend, CaptureWithoutAPlanIsRefused) {
  SPATTN_REQUIRE_GPU();
  SmallProblem p;
  DeviceTensor dq(p.q), dk(p.k), dv(p.v), dout(p.out);
  TestStream s;
  cuda_ok(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  expect_error_mentions(
      [&] { cuda_attention(dq.view(), dk.view(), dv.view(), dout.view(), p.mask, 0.125, nullptr, s.stream); },
      "make its plan before the capture");
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(s.stream, &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();
}

// A tile as "rows x cols", as the tile-choice tests expect it.
std::string tile_name(TileShape t) { return std::to_string(t.rows) + "x" + std::to_string(t.cols); }

// The sm90 kernel's tall tile (192 x 128, three consumer warpgroups) runs a
// call at head dims up to 64 where its plan computes at most 5% more pairs
// than the 128-row tile's: dense and long causal masks, not BigBird (whose
// 192-row tiles join the random blocks of two mask rows), not blocks of
// 16 x 16 (96 sub-blocks), not a call that makes a dilated split (a varlen
// call makes none), not D = 128. Host-only: the choice needs no device.
TEST(CudaTilePlan, TallTileWhereItCostsNoMoreWork) {
  const auto tile_of = [](const Pattern& pattern, int64_t len, int64_t block, int64_t head_dim, bool splits) {
    const BlockMask mask = BlockMask::build(pattern, MaskShape{len, len, block, block, 1});
    return tile_name(planner_tile(true, head_dim, mask, splits));
  };
  EXPECT_EQ(tile_of(Pattern::dense(), 4096, 128, 64, true), "192x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 16384, 128, 64, true), "192x128");
  EXPECT_EQ(tile_of(Pattern::streaming(128, 4096), 32768, 128, 64, true), "192x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 16384, 64, 64, true), "192x128");
  EXPECT_EQ(tile_of(Pattern::bigbird(4096, 128, 3, 1, 3, 0), 4096, 128, 64, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 4096, 16, 64, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 16384, 128, 128, true), "128x128");
  const Pattern dilated = Pattern::unite(Pattern::dilated({2048}, {4}, true), Pattern::sliding_window(512));
  EXPECT_EQ(tile_of(dilated, 16384, 128, 64, true), "128x128");
  // Forced: wherever the blocks fit, the call making no dilated split; or never.
  {
    const ForcedTallTile always(true);
    EXPECT_EQ(tile_of(Pattern::bigbird(4096, 128, 3, 1, 3, 0), 4096, 128, 64, true), "192x128");
    EXPECT_EQ(tile_of(Pattern::causal(), 4096, 16, 64, true), "128x128");
    EXPECT_EQ(tile_of(dilated, 16384, 128, 64, true), "128x128");
    EXPECT_EQ(tile_of(dilated, 16384, 128, 64, false), "192x128");
  }
  const ForcedTallTile never(false);
  EXPECT_EQ(tile_of(Pattern::dense(), 4096, 128, 64, true), "128x128");
}

// The sm90 kernel's narrow tile (128 x 64) runs a call at head dims 64 and
// 128 where its plan computes at most 65% (D = 64) or 80% (D = 128) of the
// wide tile's pairs (and, at D = 64, the tall tile's plan is not chosen
// first; a mask whose narrow plan computes 75% takes it at D = 128 only): BigBird on 64 x 64
// blocks (its random blocks fill few 128-key tiles), not dense or causal
// masks, BigBird on 128 x 128 blocks, nor a call that makes a dilated split
// on the wide tile; and wherever the blocks fit no 128-key tile (192 keys),
// whatever is forced. Always at D = 256 (its own tile). (The small tile,
// which calls at D = 64 and 128 would take for several of these masks, is
// forced off.) Host-only: the choice needs no device.
TEST(CudaTilePlan, NarrowTileWhereItSavesWork) {
  const auto tile_of = [](const Pattern& pattern, int64_t len, int64_t block_q, int64_t block_k, int64_t head_dim,
                          bool splits) {
    const BlockMask mask = BlockMask::build(pattern, MaskShape{len, len, block_q, block_k, 1});
    return tile_name(planner_tile(true, head_dim, mask, splits));
  };
  const ForcedTile no_small(cuda_detail::force_sm90_small_tile, false);
  const Pattern bigbird64 = Pattern::bigbird(16384, 64, 3, 1, 3, 0);
  EXPECT_EQ(tile_of(bigbird64, 16384, 64, 64, 128, true), "128x64");
  EXPECT_EQ(tile_of(bigbird64, 16384, 64, 64, 64, true), "128x64");
  EXPECT_EQ(tile_of(Pattern::causal(), 4096, 128, 192, 64, true), "128x64");
  EXPECT_EQ(tile_of(Pattern::dense(), 4096, 64, 64, 64, true), "192x128");
  EXPECT_EQ(tile_of(bigbird64, 16384, 64, 64, 256, true), "128x64");
  EXPECT_EQ(tile_of(Pattern::bigbird(16384, 128, 3, 1, 3, 0), 16384, 128, 128, 128, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::dense(), 4096, 64, 64, 128, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 16384, 64, 64, 128, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 4096, 128, 192, 128, true), "128x64");
  {
    // Blocks of 64 in groups of 2 x 2: the left column of each group kept, the
    // right one too in every other group; the narrow plan computes 75% of the
    // wide plan's pairs.
    constexpr int64_t kGrid = 64;
    std::vector<uint8_t> blocks(kGrid * kGrid, 0);
    for (int64_t r = 0; r < kGrid; ++r)
      for (int64_t c = 0; c < kGrid; c += 2) {
        blocks[r * kGrid + c] = 1;
        blocks[r * kGrid + c + 1] = (r / 2 + c / 2) % 2 == 0 && r % 2 == 0;
      }
    const Pattern three_quarters = Pattern::custom(blocks, 1, kGrid, kGrid, 64, 64);
    const ForcedTallTile no_tall(false);
    EXPECT_EQ(tile_of(three_quarters, kGrid * 64, 64, 64, 128, true), "128x64");
    EXPECT_EQ(tile_of(three_quarters, kGrid * 64, 64, 64, 64, true), "128x128");
  }
  const Pattern dilated = Pattern::unite(Pattern::dilated({2048}, {4}, true), Pattern::sliding_window(512));
  EXPECT_EQ(tile_of(dilated, 16384, 128, 128, 128, true), "128x128");
  {
    const ForcedTile always(cuda_detail::force_sm90_narrow_tile, true);
    EXPECT_EQ(tile_of(Pattern::dense(), 4096, 128, 128, 128, true), "128x64");
    EXPECT_EQ(tile_of(dilated, 16384, 128, 128, 128, true), "128x128");
    EXPECT_EQ(tile_of(dilated, 16384, 128, 128, 128, false), "128x64");
  }
  const ForcedTile never(cuda_detail::force_sm90_narrow_tile, false);
  EXPECT_EQ(tile_of(bigbird64, 16384, 64, 64, 128, true), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 4096, 128, 192, 128, true), "128x64");
}

// The sm90 kernel's small tile (64 x 64, two CTAs per multiprocessor) runs
// a call at head dims 64 and 128 where its plan's pairs over its speed per
// pair (small_tile_speed in kernel_choice.cpp: 0.65 at D = 64, 0.7 at
// D = 128) are no more than the wide tile's plan's pairs and the narrow
// tile's over that tile's share: BigBird on 64 x 64 blocks (its plan computes 39% of the wide plan's
// pairs, the narrow plan 62%), not BigBird on 128 x 128 blocks nor causal
// masks on blocks of 64 (whose small plan computes 99.6% of the wide one's),
// nor blocks of 128 x 64 (as many pairs as the narrow plan's); never at
// D = 256, nor for a call whose query heads are packed into a tile's rows.
// Host-only.
TEST(CudaTilePlan, SmallTileWhereItSavesWork) {
  const auto tile_of = [](const Pattern& pattern, int64_t block_q, int64_t block_k, int64_t head_dim,
                          bool packed = false) {
    const BlockMask mask = BlockMask::build(pattern, MaskShape{16384, 16384, block_q, block_k, 1});
    return tile_name(planner_tile(true, head_dim, mask, true, packed));
  };
  const Pattern bigbird64 = Pattern::bigbird(16384, 64, 3, 1, 3, 0);
  for (int64_t head_dim : {64, 128}) {
    SCOPED_TRACE("head dim " + std::to_string(head_dim));
    EXPECT_EQ(tile_of(bigbird64, 64, 64, head_dim), "64x64");
    EXPECT_EQ(tile_of(bigbird64, 64, 64, head_dim, true), "128x64");
    EXPECT_EQ(tile_of(Pattern::bigbird(16384, 128, 3, 1, 3, 0), 128, 128, head_dim), "128x128");
    EXPECT_EQ(tile_of(Pattern::causal(), 128, 64, head_dim), head_dim == 64 ? "192x128" : "128x128");
  }
  EXPECT_EQ(tile_of(bigbird64, 64, 64, 256), "128x64");
  EXPECT_EQ(tile_of(Pattern::causal(), 64, 64, 128), "128x128");
  EXPECT_EQ(tile_of(Pattern::causal(), 64, 64, 64), "192x128");
  {
    const ForcedTallTile no_tall(false);
    EXPECT_EQ(tile_of(Pattern::causal(), 64, 64, 64), "128x128");
    const ForcedTile always(cuda_detail::force_sm90_small_tile, true);
    EXPECT_EQ(tile_of(Pattern::dense(), 128, 128, 64), "64x64");
    EXPECT_EQ(tile_of(Pattern::dense(), 128, 128, 128), "64x64");
    EXPECT_EQ(tile_of(Pattern::dense(), 128, 128, 64, true), "128x128");
    EXPECT_EQ(tile_of(Pattern::dense(), 128, 128, 256), "128x64");
  }
  const ForcedTile never(cuda_detail::force_sm90_small_tile, false);
  EXPECT_EQ(tile_of(bigbird64, 64, 64, 64), "128x64");
  EXPECT_EQ(tile_of(bigbird64, 64, 64, 128), "128x64");
}

// The sm80 kernel runs a call at head dims up to 64 on its narrow tile
// (128 x 64) where that tile's plan computes at most 90% (D = 64) or 80%
// (D = 32) of the wide tile's pairs: BigBird on 64 x 64 blocks (the narrow
// plan computes 62% of BigBird's wide plan's pairs), not dense or causal
// masks nor BigBird on 128 x 128 blocks, unless force_sm80_wide_tile says
// otherwise; always at D = 128 (its only tile there). Host-only.
TEST(CudaTilePlan, Sm80NarrowTileWhereItSavesWork) {
  const auto tile_of = [](const Pattern& pattern, int64_t block, int64_t head_dim) {
    const BlockMask mask = BlockMask::build(pattern, MaskShape{16384, 16384, block, block, 1});
    return tile_name(planner_tile(false, head_dim, mask, true));
  };
  const Pattern bigbird64 = Pattern::bigbird(16384, 64, 3, 1, 3, 0);
  for (int64_t head_dim : {32, 64}) {
    SCOPED_TRACE("head dim " + std::to_string(head_dim));
    EXPECT_EQ(tile_of(bigbird64, 64, head_dim), "128x64");
    EXPECT_EQ(tile_of(Pattern::dense(), 64, head_dim), "128x128");
    EXPECT_EQ(tile_of(Pattern::causal(), 64, head_dim), "128x128");
    EXPECT_EQ(tile_of(Pattern::bigbird(16384, 128, 3, 1, 3, 0), 128, head_dim), "128x128");
  }
  EXPECT_EQ(tile_of(Pattern::dense(), 128, 128), "128x64");
  {
    const ForcedTile wide(cuda_detail::force_sm80_wide_tile, true);
    EXPECT_EQ(tile_of(bigbird64, 64, 64), "128x128");
    EXPECT_EQ(tile_of(bigbird64, 64, 128), "128x64");
  }
  const ForcedTile narrow(cuda_detail::force_sm80_wide_tile, false);
  EXPECT_EQ(tile_of(Pattern::dense(), 64, 64), "128x64");
}

// The sm90 kernel compares every tile a call may take, the tall one too: 60%
// of 64 x 64 blocks kept at random make a plan on the tall tile of at most
// 5% more pairs than the wide tile's (it would run faster than the wide
// tile) and one on the small tile of at most 65% of them, so at D = 64 the
// call takes the small tile, and the tall one where the small tile is
// forced off. Host-only.
TEST(CudaTilePlan, TallTileComparedWithTheSmallOne) {
  constexpr int64_t kGrid = 128;
  std::mt19937_64 rng(7);
  std::bernoulli_distribution kept(0.6);
  std::vector<uint8_t> blocks(kGrid * kGrid);
  for (uint8_t& b : blocks) b = kept(rng);
  const BlockMask mask =
      BlockMask::build(Pattern::custom(blocks, 1, kGrid, kGrid, 64, 64), MaskShape{kGrid * 64, kGrid * 64, 64, 64, 1});
  const auto pairs = [&](TileShape t) {
    return static_cast<double>(cuda_detail::tile_plan_key_tiles(mask, t)) * static_cast<double>(t.rows * t.cols);
  };
  const double wide = pairs(cuda_detail::kSm90WideTile);
  ASSERT_LE(pairs(cuda_detail::kSm90TallTile), 1.05 * wide);
  ASSERT_LE(pairs(cuda_detail::kSm90SmallTile), 0.65 * wide);
  const auto tile_of = [&](int64_t head_dim) {
    return tile_name(planner_tile(true, head_dim, mask, true));
  };
  EXPECT_EQ(tile_of(64), "64x64");
  EXPECT_EQ(tile_of(128), "64x64");
  const ForcedTile no_small(cuda_detail::force_sm90_small_tile, false);
  EXPECT_EQ(tile_of(64), "192x128");
  EXPECT_EQ(tile_of(128), "128x128");
}

// Blocks of 192 query rows fit only the sm90 kernel's small tile among the
// 128- and 64-row tiles: calls at D = 64 and 128 run it, packed calls (and
// D = 256) find no sm90 tile; blocks of 8 run on no sm90 tile. Host-only.
TEST(CudaTilePlan, OnlyTheSmallTileFitsRowsOf192) {
  const BlockMask rows192 = BlockMask::build(Pattern::causal(), MaskShape{4096, 4096, 192, 64, 1});
  for (int64_t head_dim : {64, 128}) {
    EXPECT_TRUE(cuda_detail::sm90_tile_fits(head_dim, rows192, false));
    EXPECT_FALSE(cuda_detail::sm90_tile_fits(head_dim, rows192, true));
    const TileShape t = planner_tile(true, head_dim, rows192, true);
    EXPECT_EQ(t.rows, 64);
    EXPECT_EQ(t.cols, 64);
  }
  EXPECT_FALSE(cuda_detail::sm90_tile_fits(256, rows192, false));
  const BlockMask blocks8 = BlockMask::build(Pattern::causal(), MaskShape{1024, 1024, 8, 8, 1});
  EXPECT_FALSE(cuda_detail::sm90_tile_fits(64, blocks8, false));
}

TEST(CudaBackend, AttentionDispatchesDevicePointersToCuda) {
  SPATTN_REQUIRE_GPU();
  EXPECT_TRUE(backend_available(Backend::Cuda));
  EXPECT_EQ(best_backend(), Backend::Cuda);
  SmallProblem p;
  DeviceTensor dq(p.q), dk(p.k), dv(p.v), dout(p.out);
  dout.poison();
  attention(dq.view(), dk.view(), dv.view(), dout.view(), p.mask);
  cuda_ok(cudaDeviceSynchronize(), "attention()");
  HostTensor got(DType::BF16, 1, 2, 300, 64), ref(DType::F64, 1, 2, 300, 64);
  dout.copy_to(got);
  reference_attention(p.q.view, p.k.view, p.v.view, ref.view, p.mask, 0.125, nullptr);
  EXPECT_LT(relative_error(got.to_double(), ref.to_double()), out_tolerance(DType::BF16));
}

}  // namespace
}  // namespace spattn::testing
