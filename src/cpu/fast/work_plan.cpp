// work_plan.cpp - tiles, work items and key chunks of the fast CPU backend
// (see work_plan.hpp).
#include "cpu/fast/work_plan.hpp"

#include <algorithm>

namespace spattn::cpu_fast {
namespace {

constexpr int64_t kItemRows = 512;     // query rows sharing each key chunk
constexpr int64_t kMaxItemTiles = 16;  // bounds the per-thread scratch
static_assert(kMaxItemTiles <= kMaxGroupTiles, "tile bit sets are 64-bit");

// Keys visited by each mask row (full and partial blocks alike).
std::vector<int64_t> visited_keys(const BlockMaskView& plan) {
  std::vector<int64_t> keys(static_cast<size_t>(plan.num_heads * plan.num_q_blocks), 0);
  for (size_t r = 0; r < keys.size(); ++r)
    for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at)
      keys[r] += plan.k_last(plan.kv_indices[at]) - plan.k_first(plan.kv_indices[at]);
  return keys;
}

}  // namespace

void row_ranges(const BlockMaskView& plan, int64_t r, std::vector<KeyRange>& ranges) {
  ranges.clear();
  for (int64_t at = plan.row_begin(r); at < plan.row_end(r); ++at) {
    const int64_t kb = plan.kv_indices[at];
    const bool partial = plan.kv_full[at] == 0;
    if (!ranges.empty() && ranges.back().last == plan.k_first(kb) && ranges.back().partial == partial)
      ranges.back().last = plan.k_last(kb);
    else
      ranges.push_back(KeyRange{plan.k_first(kb), plan.k_last(kb), partial});
  }
}

TileLayout::TileLayout(const BlockMaskView& plan, int64_t tile_rows_)
    : tile_rows(tile_rows_),
      tiles_per_block((plan.block_q + tile_rows_ - 1) / tile_rows_),
      tiles_per_item(std::min(kMaxItemTiles, std::max<int64_t>(1, kItemRows / tile_rows_))) {}

int64_t TileLayout::tiles_per_head(const BlockMaskView& plan) const {
  return tiles_per_block * plan.num_q_blocks;
}

int64_t TileLayout::row0(const BlockMaskView& plan, int64_t t) const {
  return plan.q_first(block_of(t)) + (t % tiles_per_block) * tile_rows;
}

int64_t TileLayout::rows(const BlockMaskView& plan, int64_t t) const {
  return std::min(tile_rows, plan.q_last(block_of(t)) - row0(plan, t));
}

WorkPlan plan_items(const BlockMaskView& plan, const TileLayout& layout, int64_t batch,
                    int64_t query_heads, int64_t kv_heads) {
  const std::vector<int64_t> keys = visited_keys(plan);
  const int64_t per_head = layout.tiles_per_head(plan);
  std::vector<WorkItem> items;
  std::vector<int64_t> cost;
  int64_t max_keys = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < query_heads; ++h) {
      const int64_t mask_head = plan.mask_head(h, query_heads);
      for (int64_t t0 = 0; t0 < per_head; t0 += layout.tiles_per_item) {
        WorkItem item{b, h, t0, t0};
        int64_t pairs = 0, item_keys = 0;
        for (int64_t t = t0; t < std::min(per_head, t0 + layout.tiles_per_item); ++t) {
          const int64_t rows = layout.rows(plan, t);
          if (rows <= 0) break;  // only the last block has fewer tiles
          item.last_tile = t + 1;
          const int64_t row_keys = keys[static_cast<size_t>(plan.row(mask_head, layout.block_of(t)))];
          pairs += rows * row_keys;
          if (t == t0 || layout.block_of(t) != layout.block_of(t - 1)) item_keys += row_keys;
        }
        if (item.last_tile == item.first_tile) continue;
        items.push_back(item);
        cost.push_back(pairs);
        max_keys = std::max(max_keys, std::min(item_keys, plan.k_len));
      }
    }
  }
  // Per (batch, kv head), costliest first: keeps staged keys reusable and
  // leaves the cheapest items of the last head for the end.
  const int64_t group = query_heads / kv_heads;
  const auto kv_of = [&](const WorkItem& w) { return w.batch * kv_heads + w.head / group; };
  std::vector<int64_t> order(items.size());
  for (size_t n = 0; n < order.size(); ++n) order[n] = static_cast<int64_t>(n);
  std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
    const int64_t kx = kv_of(items[static_cast<size_t>(x)]), ky = kv_of(items[static_cast<size_t>(y)]);
    return kx != ky ? kx < ky : cost[x] > cost[y];
  });
  WorkPlan work;
  work.items.reserve(items.size());
  for (int64_t n : order) {
    const WorkItem& item = items[static_cast<size_t>(n)];
    if (work.items.empty() || kv_of(work.items.back()) != kv_of(item))
      work.group_begin.push_back(static_cast<int64_t>(work.items.size()));
    work.items.push_back(item);
  }
  work.group_begin.push_back(static_cast<int64_t>(work.items.size()));
  work.max_item_keys = max_keys;
  return work;
}

int64_t max_item_chunks(const BlockMaskView& plan, const TileLayout& layout, int64_t chunk_keys) {
  int64_t most_blocks = 0;
  for (int64_t r = 0; r < plan.num_heads * plan.num_q_blocks; ++r)
    most_blocks = std::max(most_blocks, plan.row_end(r) - plan.row_begin(r));
  const int64_t blocks_per_item = layout.tiles_per_item / layout.tiles_per_block + 2;
  return 2 * blocks_per_item * most_blocks + plan.k_len / chunk_keys + 2;
}

void key_chunks(const BlockMaskView& plan, const TileLayout& layout, const WorkItem& item,
                int64_t query_heads, int64_t chunk_keys, ChunkScratch& scratch,
                std::vector<KeyChunk>& chunks) {
  chunks.clear();
  const int64_t mask_head = plan.mask_head(item.head, query_heads);
  const int64_t first_block = layout.block_of(item.first_tile);
  const int64_t num_blocks = layout.block_of(item.last_tile - 1) - first_block + 1;
  std::vector<std::vector<KeyRange>>& ranges = scratch.ranges;
  std::vector<int64_t>& bounds = scratch.bounds;
  if (static_cast<int64_t>(ranges.size()) < num_blocks) ranges.resize(static_cast<size_t>(num_blocks));
  bounds.clear();
  uint64_t block_tiles[kMaxGroupTiles] = {};
  for (int64_t n = 0; n < num_blocks; ++n) {
    std::vector<KeyRange>& own = ranges[static_cast<size_t>(n)];
    row_ranges(plan, plan.row(mask_head, first_block + n), own);
    for (const KeyRange& r : own) {
      bounds.push_back(r.first);
      bounds.push_back(r.last);
    }
  }
  for (int64_t t = item.first_tile; t < item.last_tile; ++t)
    block_tiles[layout.block_of(t) - first_block] |= uint64_t{1} << (t - item.first_tile);
  std::sort(bounds.begin(), bounds.end());

  size_t cursor[kMaxGroupTiles] = {};
  for (size_t n = 0; n + 1 < bounds.size(); ++n) {
    int64_t x = bounds[n];
    const int64_t y = bounds[n + 1];
    if (x == y) continue;
    // [x, y) lies wholly inside or outside each block's ranges.
    uint64_t tiles = 0, partial = 0;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const std::vector<KeyRange>& own = ranges[static_cast<size_t>(b)];
      size_t& at = cursor[b];
      while (at < own.size() && own[at].last <= x) ++at;
      if (at < own.size() && own[at].first <= x) {
        tiles |= block_tiles[b];
        if (own[at].partial) partial |= block_tiles[b];
      }
    }
    if (tiles == 0) continue;
    if (!chunks.empty()) {
      KeyChunk& last = chunks.back();
      if (last.first + last.count == x && last.tiles == tiles && last.partial == partial) {
        const int64_t take = std::min(chunk_keys - last.count, y - x);
        last.count += take;
        x += take;
      }
    }
    for (; x < y; x += chunk_keys)
      chunks.push_back(KeyChunk{x, std::min(chunk_keys, y - x), 0, tiles, partial});
  }
}

}  // namespace spattn::cpu_fast
