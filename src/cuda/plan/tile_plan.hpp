// cuda/plan/tile_plan.hpp - the kernel tile grid a CUDA kernel walks, derived
// on the host from a BlockMask (plain C++, no CUDA).
//
// A kernel processes query tiles of `rows` rows against key tiles of `cols`
// keys. When the mask's blocks are multiples of the tile (block_q % rows == 0,
// block_k % cols == 0) the kernel walks the mask itself: query tile t reads
// mask row t * rows / block_q and each kept mask block expands into
// block_k / cols key tiles. Otherwise the mask is re-expressed at tile
// granularity: a tile is kept if any mask block inside it is, full if every
// mask block inside it is kept and full, and otherwise partial, carrying two
// bit sets over its sub-blocks (the mask blocks it contains, row-major):
// `present` (kept) and `full`. Inside such a tile a pair is allowed when its
// sub-block is present and either full or allowed by the pattern predicate.
//
// The plan also holds the work: one item per (mask head, query tile) row,
// except that a row visiting far more key tiles than the average (BigBird or
// Longformer global rows, per-head mixes) is split into pieces of about
// twice the average, each writing a partial result (normalised O and LSE in
// fp32) that a combine step merges; a plan asked for more items than it has
// rows (a call whose rows times copies would leave multiprocessors idle, as
// in decoding: few query tiles over many keys) splits its long rows further,
// into about that many pieces, one asked to keep rows of up to
// whole_row_tiles key tiles whole (a call with that much work per running
// CTA) splits fewer, and one asked to spread the last round of a grid of
// equal rows (tail_split) splits a few rows into short pieces. Items are
// ordered by work in length
// bands, most first, so a grid launched in that order starts the longest
// pieces first; within a band they go mask head by mask head.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "spattn/block_mask.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

struct TileShape {
  int64_t rows = 128;  // query rows per kernel tile
  int64_t cols = 64;   // keys per kernel tile
  constexpr bool operator==(const TileShape& o) const { return rows == o.rows && cols == o.cols; }
};

// Sub-blocks of one tile: each covers (1 << row_shift) rows and (1 << col_shift)
// keys; `cols` of them per tile row.
struct SubBlockGrid {
  int32_t row_shift = 0;
  int32_t col_shift = 0;
  int32_t cols = 1;
};

// What one CTA computes: entries [begin, end) of a row's kept blocks.
struct WorkItem {
  int64_t begin = 0, end = 0;
  int32_t row = 0;    // mask head * num_q_tiles + query tile
  int32_t slot = -1;  // partial-result slot of a split row; -1: writes the output itself
  // 1: at least two key tiles (below the mask's key length), every one full
  // (at head dims up to 64 the sm90 kernel runs such items with two score
  // tiles, outside varlen batches and dilated splits); 0 otherwise or unknown.
  int32_t all_full = 0;
};

// A split row: its pieces wrote slots [first_slot, first_slot + pieces).
struct SplitRow {
  int32_t row = 0;
  int32_t first_slot = 0;
  int32_t pieces = 0;
};

// Rows far longer than the average are split only into pieces of at least
// this many key tiles.
constexpr int64_t kMinSplitTiles = 32;

// The key tiles beyond which a plan of `rows` rows visiting `total_tiles` key
// tiles in all splits a row (into pieces of about this many): twice the
// average row, at least kMinSplitTiles.
inline int64_t split_piece_tiles(int64_t total_tiles, int64_t rows) {
  return std::max(kMinSplitTiles, 2 * pattern_math::ceil_div(total_tiles, rows));
}

// Rows split to reach a plan's min_items (make_tile_plan) are split only
// into pieces of at least this many key tiles: each piece costs a unit's
// start and end and a partial result of the tile's rows (written, then read
// by the merge), which a piece this long amortises while the
// multiprocessors it fills would otherwise idle.
constexpr int64_t kMinFillPieceTiles = 8;
// Where at most a quarter of a tile's rows hold queries (a decoding step: one
// or a few query positions, their grouped heads packed), a piece's partial
// result is a few rows, and pieces of two tiles pay: on an H100 a decoding
// step over a 4096-key window ran 8-26% faster than with pieces of 8 tiles,
// while a prefill of 1024 queries split so ran at half its speed
// (same-run A/B).
constexpr int64_t kMinFillPieceTilesFewRows = 2;

// The least fill piece for calls whose tiles hold `query_rows` rows with
// queries (at most the tile's rows).
inline int64_t min_fill_piece_tiles(int64_t query_rows, TileShape tile) {
  return 4 * query_rows <= tile.rows ? kMinFillPieceTilesFewRows : kMinFillPieceTiles;
}

// How a plan splits its rows beside the rows far longer than the average
// (make_tile_plan). `min_items`: where the rows are fewer, rows are split into
// pieces of ceil(all rows' key tiles / min_items) tiles, at least
// `min_piece_tiles`, so that the plan has about min_items items where its
// rows are long enough (0: split only rows far longer than the average,
// split_piece_tiles). `whole_row_tiles`: rows of at most that many key tiles
// stay whole, and longer ones split into pieces of about that many (where it
// exceeds split_piece_tiles; a call whose work per running CTA is that long
// runs such a row whole, longest first, and ends it no later than the rest,
// without partial results to write and merge). `tail_rows`: the last that
// many rows (mask head by mask head, query tile by query tile) split into
// pieces of about `tail_piece_tiles` key tiles (tail_split).
struct PlanSplit {
  int64_t min_items = 0;
  int64_t min_piece_tiles = kMinFillPieceTiles;
  int64_t whole_row_tiles = 0;
  int64_t tail_rows = 0;
  int64_t tail_piece_tiles = 0;
  bool operator==(const PlanSplit& o) const {
    return min_items == o.min_items && min_piece_tiles == o.min_piece_tiles &&
           whole_row_tiles == o.whole_row_tiles && tail_rows == o.tail_rows &&
           tail_piece_tiles == o.tail_piece_tiles;
  }
};

// The split that spreads the last round of a grid of equal rows over every
// running CTA. `rows` rows of `row_tiles` key tiles each, run for `copies`
// copies (batch x heads per mask head) by `resident` CTAs at a time, take
// floor(units / resident) full rounds of units and a last one in which only
// units % resident CTAs work while the others wait a whole row for the call
// to end (dense attention at 32K with 16 heads on 132 multiprocessors: 4096
// units, 31 rounds and 4 units, 3% of the call). So the last
// ceil(remainder / copies) rows are split (for every copy; their pieces run
// last, after the whole rows), into pieces of a quarter of their tiles per
// running CTA, at least kMinTailPieceTiles: the pieces then fill the last
// round to within a fraction of a row. No split (tail_rows 0) where the
// units divide evenly, fill fewer than one round (the case of a plan asked
// for min_items) or a row would split into fewer than two pieces.
PlanSplit tail_split(int64_t rows, int64_t row_tiles, int64_t copies, int64_t resident);

// The least piece of tail_split. Each piece writes a partial result of the
// tile's rows that the merge reads back; pieces of 16 tiles ran dense
// attention at 32K/16 on the sm90 kernel 0.3% faster than pieces of 8
// (H200, same-run A/B).
constexpr int64_t kMinTailPieceTiles = 16;

// A mask re-expressed at tile granularity (blocks of tile.rows x tile.cols),
// for a tile the mask's blocks are not multiples of: the tile's kept tiles
// per (mask head, query tile) row, each with its sub-block bit sets. It
// depends on the mask and the tile alone, so every plan of the tile shares it.
struct TileGrainMask {
  std::vector<int64_t> row_offsets;
  std::vector<int32_t> kv_indices;
  std::vector<uint8_t> kv_full;
  std::vector<uint64_t> sub_present;  // per entry
  std::vector<uint64_t> sub_full;
};

struct HostTilePlan {
  // Null: the kernel walks the mask's own arrays; else the arrays of
  // *derived, with block sizes (tile.rows, tile.cols).
  std::shared_ptr<const TileGrainMask> derived;
  SubBlockGrid sub;
  std::vector<WorkItem> items;  // by length band, then mask head, then most key tiles first
  // Length bands of `items`: band k is items [band_first[k], band_first[k + 1]),
  // each item longer than 2/3 of the band's longest, which is no longer than
  // 2/3 of the band before's longest (empty items, rows without a kept block,
  // share one last band); the last entry is items.size(). Within a band the
  // items go mask head by mask head, so that the CTAs running at one time
  // read few heads' keys and values (a per-head mask's items hold its heads).
  // A persistent grid that runs each band copy by copy keeps both its
  // longest-first order and, within a band, one head's keys and values
  // shared in L2 (common/work_units.hpp).
  std::vector<int32_t> band_first;
  int64_t max_item_entries = 0;    // the longest item's entries
  int64_t min_item_entries = 0;    // the shortest item's entries
  int64_t total_item_entries = 0;  // all items' entries
  std::vector<SplitRow> split_rows;
  int32_t num_slots = 0;
};

// Throws spattn::Error unless the mask's block sizes fit the tile (each a
// multiple or a divisor of the tile side, at most 64 sub-blocks per tile).
void check_tile_fit(const BlockMask& mask, TileShape tile);

// Whether check_tile_fit would accept the mask for `tile`.
bool tile_fits(const BlockMask& mask, TileShape tile);

// The key tiles of each row of the mask at the granularity of `tile` (rows
// as derive_tile_grain_mask's), counted without filling them (one pass over
// the kept blocks); empty where the tile walks the mask itself. The mask
// must fit the tile.
std::vector<int64_t> tile_grain_row_counts(const BlockMask& mask, TileShape tile);

// The mask at the granularity of `tile`, or null where the tile walks the
// mask itself (its blocks are multiples of the tile). The mask must fit the
// tile. `row_counts` (tile_grain_row_counts of this mask and tile, where a
// caller already has them) spares the count.
std::shared_ptr<const TileGrainMask> derive_tile_grain_mask(const BlockMask& mask, TileShape tile,
                                                            const std::vector<int64_t>& row_counts);
std::shared_ptr<const TileGrainMask> derive_tile_grain_mask(const BlockMask& mask, TileShape tile);

// The plan of `tile` over `derived`, which must be derive_tile_grain_mask of
// this mask and tile (only its being null or not is checked), its rows split
// as `split` asks.
HostTilePlan make_tile_plan(const BlockMask& mask, TileShape tile, std::shared_ptr<const TileGrainMask> derived,
                            const PlanSplit& split);

// The same, deriving the tile-grain mask first.
HostTilePlan make_tile_plan(const BlockMask& mask, TileShape tile, const PlanSplit& split = {});

// The place of each walked entry (kv_full 0: partial) among the partial
// ones, in entry order, and -1 for a full one: where a call's table of
// keep bits (common/keep_bits_table.cuh) holds the entry's tiles.
std::vector<int32_t> partial_entry_slots(const std::vector<uint8_t>& kv_full);

// The key tiles the plan of `tile` visits over all its rows (its items'
// entries times the key tiles of an entry: block_k / tile.cols where the
// plan walks the mask, one where it is derived), counted without making the
// plan (one pass over the kept blocks, or the sum of `row_counts`,
// tile_grain_row_counts of this mask and tile, where given). The mask must
// fit the tile.
int64_t tile_plan_key_tiles(const BlockMask& mask, TileShape tile, const std::vector<int64_t>& row_counts);
int64_t tile_plan_key_tiles(const BlockMask& mask, TileShape tile);

}  // namespace spattn::cuda_detail
