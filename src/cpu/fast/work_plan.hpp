// work_plan.hpp - how the fast CPU backend splits attention into work items.
//
// The query rows of each (batch, head) are cut into tiles of the kernel's
// width, block by block of the mask (a tile never spans two query blocks).
// A work item is a run of consecutive tiles of one (batch, head); its tiles
// share every key chunk they visit, so a chunk is read from memory once per
// item instead of once per tile. Items are grouped by (batch, kv head) and,
// within a group, ordered by their number of visited (row, key) pairs,
// largest first, for dynamic scheduling.
//
// For one item, key_chunks() walks the mask rows of its query blocks through
// the block iterator and produces the ordered list of key chunks: every chunk
// lies inside one kept block run of each tile that visits it, marked full or
// partial per tile, and holds at most chunk_keys keys. The driver stages the
// chunks' keys and values for the kernels (kv_stage.hpp).
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/fast/kernel_args.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cpu_fast {

// Keys [first, last) of one mask row, all full or all partial.
struct KeyRange {
  int64_t first = 0;
  int64_t last = 0;
  bool partial = false;
};

// Adjacent kept blocks of the same kind of mask row r, merged.
void row_ranges(const BlockMaskView& plan, int64_t r, std::vector<KeyRange>& ranges);

struct TileLayout {
  int64_t tile_rows = 0;        // M
  int64_t tiles_per_block = 0;  // ceil(block_q / M); the last block may use fewer
  int64_t tiles_per_item = 0;

  TileLayout(const BlockMaskView& plan, int64_t tile_rows);
  int64_t tiles_per_head(const BlockMaskView& plan) const;
  // Query block of tile t, and its rows [row0, row0 + rows) (rows <= 0: no such tile).
  int64_t block_of(int64_t t) const { return t / tiles_per_block; }
  int64_t row0(const BlockMaskView& plan, int64_t t) const;
  int64_t rows(const BlockMaskView& plan, int64_t t) const;
};

struct WorkItem {
  int64_t batch = 0;
  int64_t head = 0;        // query head
  int64_t first_tile = 0;  // tiles [first_tile, last_tile) of this (batch, head)
  int64_t last_tile = 0;
};

struct WorkPlan {
  std::vector<WorkItem> items;       // grouped by (batch, kv head), costliest first in each
  std::vector<int64_t> group_begin;  // group g: items [group_begin[g], group_begin[g + 1])
  int64_t max_item_keys = 0;         // bound on the distinct keys any item visits
};

WorkPlan plan_items(const BlockMaskView& plan, const TileLayout& layout, int64_t batch,
                    int64_t query_heads, int64_t kv_heads);

// Upper bound on the chunks of any item (for reserving memory up front).
int64_t max_item_chunks(const BlockMaskView& plan, const TileLayout& layout, int64_t chunk_keys);

// Reusable buffers of key_chunks().
struct ChunkScratch {
  std::vector<std::vector<KeyRange>> ranges;  // per query block of the item
  std::vector<int64_t> bounds;                // every range end point
};

// The ordered key chunks of `item` (disjoint, so at most max_item_keys keys).
// Their `staged` offsets are left to StagedKv::prepare (kv_stage.hpp).
void key_chunks(const BlockMaskView& plan, const TileLayout& layout, const WorkItem& item,
                int64_t query_heads, int64_t chunk_keys, ChunkScratch& scratch,
                std::vector<KeyChunk>& chunks);

}  // namespace spattn::cpu_fast
