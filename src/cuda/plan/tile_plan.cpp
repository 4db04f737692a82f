// cuda/plan/tile_plan.cpp - derivation of the kernel tile plan and the
// longest-first work order from a BlockMask (see tile_plan.hpp).
//
// Cost is proportional to the kept blocks: each kept mask block is expanded
// into the key tiles it overlaps, per query tile, with a scratch array indexed
// by key tile that is reset only where it was touched. Query tiles are
// independent: large masks derive them on all cores (OpenMP).
#include "cuda/plan/tile_plan.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

using pattern_math::ceil_div;

int32_t log2_exact(int64_t x) {
  int32_t s = 0;
  while ((int64_t{1} << s) < x) ++s;
  return s;
}

bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

// A power-of-two block fits any side (a tile side of 192 takes blocks of 128
// or 256 as 64-row sub-blocks, below); any other block only a side it is a
// multiple of.
bool fits_side(int64_t block, int64_t side) { return block % side == 0 || is_pow2(block); }

// The side of the sub-blocks a block splits a tile side into: the largest
// power of two dividing both (for a power-of-two side, the smaller of the two).
int64_t sub_side(int64_t block, int64_t side) {
  int64_t s = 1;
  while (block % (2 * s) == 0 && side % (2 * s) == 0) s *= 2;
  return s;
}

bool is_direct(const BlockMask& mask, TileShape tile) {
  return mask.block_q() % tile.rows == 0 && mask.block_k() % tile.cols == 0;
}

// Sub-block sizes inside one tile (sub_side): the mask block, capped by the
// tile side, or 64 rows where 128- or 256-row blocks meet a 192-row tile.
SubBlockGrid sub_grid(const BlockMask& mask, TileShape tile) {
  SubBlockGrid g;
  g.row_shift = log2_exact(sub_side(mask.block_q(), tile.rows));
  g.col_shift = log2_exact(sub_side(mask.block_k(), tile.cols));
  g.cols = static_cast<int32_t>(tile.cols >> g.col_shift);
  return g;
}

// The mask rows (query blocks) that query tile t overlaps.
struct MaskRows {
  int64_t first, last;
};
MaskRows mask_rows_of(const BlockMaskView& view, TileShape tile, int64_t t) {
  return {t * tile.rows / view.block_q, std::min((t * tile.rows + tile.rows - 1) / view.block_q, view.num_q_blocks - 1)};
}

// The key tiles each key block overlaps, without a division per block: a
// block that fits the tile's columns (fits_side) spans a whole number of
// tiles, or is a power of two smaller than the tile (a sub-block column).
struct KeyTileMap {
  int64_t tiles_per_block;  // key tiles a block spans (1 where blocks are smaller)
  int32_t block_shift;      // log2 of the blocks per tile where blocks are smaller, else 0
  int64_t last_tile;
  KeyTileMap(int64_t block_k, TileShape tile, int64_t num_k_tiles)
      : tiles_per_block(std::max<int64_t>(1, block_k / tile.cols)),
        block_shift(block_k < tile.cols ? log2_exact(tile.cols / block_k) : 0),
        last_tile(num_k_tiles - 1) {}
  int64_t first(int64_t kb) const { return (kb * tiles_per_block) >> block_shift; }
  int64_t last(int64_t kb) const { return std::min(first(kb) + tiles_per_block - 1, last_tile); }
  // Block kb's sub-block column inside its tile (0 where blocks span tiles).
  int64_t sub_col(int64_t kb) const { return kb & ((int64_t{1} << block_shift) - 1); }
};

// Sub-blocks of a tile (rows sub_rows_in x columns sub_cols_in of a grid
// `cols` wide) as bits, row-major.
uint64_t sub_block_bits(int64_t sub_rows_in, int64_t sub_cols_in, int32_t cols) {
  const uint64_t row = sub_cols_in >= 64 ? ~uint64_t{0} : (uint64_t{1} << sub_cols_in) - 1;
  uint64_t bits = 0;
  for (int64_t sr = 0; sr < sub_rows_in; ++sr) bits |= row << (sr * cols);
  return bits;
}

// Number of key tiles a (mask head, query tile) row visits.
std::vector<int64_t> row_work(const BlockMask& mask, TileShape tile, const HostTilePlan& plan) {
  const int64_t num_q_tiles = ceil_div(mask.q_len(), tile.rows);
  std::vector<int64_t> work(static_cast<size_t>(mask.num_heads() * num_q_tiles));
  if (plan.derived) {
    const std::vector<int64_t>& offsets = plan.derived->row_offsets;
    for (size_t r = 0; r < work.size(); ++r) work[r] = offsets[r + 1] - offsets[r];
    return work;
  }
  const BlockMaskView view = mask.view();
  const int64_t tiles_per_block = mask.block_k() / tile.cols;
  for (int64_t g = 0; g < mask.num_heads(); ++g)
    for (int64_t t = 0; t < num_q_tiles; ++t) {
      const int64_t r = view.row(g, t * tile.rows / mask.block_q());
      work[g * num_q_tiles + t] = (view.row_end(r) - view.row_begin(r)) * tiles_per_block;
    }
  return work;
}

// Masks with fewer kept blocks derive their tile-grain form on one thread.
constexpr int64_t kMinParallelBlocks = 4096;

// The rows of a mask's tile-grain form (row g * num_q_tiles + t for mask head
// g and query tile t): the distinct key tiles overlapped by the kept blocks
// of the mask rows that query tile t meets. Rows are independent, counted
// and filled one at a time with per-thread scratch arrays indexed by key
// tile.
class TileGrainRows {
 public:
  TileGrainRows(const BlockMask& mask, TileShape tile, const SubBlockGrid& sub)
      : view_(mask.view()),
        tile_(tile),
        sub_(sub),
        num_q_tiles_(ceil_div(mask.q_len(), tile.rows)),
        num_k_tiles_(ceil_div(mask.k_len(), tile.cols)),
        key_tiles_(mask.block_k(), tile, num_k_tiles_),
        last_tile_sub_cols_(ceil_div(mask.k_len() - (num_k_tiles_ - 1) * tile.cols, int64_t{1} << sub.col_shift)) {}

  int64_t rows() const { return view_.num_heads * num_q_tiles_; }
  int64_t num_k_tiles() const { return num_k_tiles_; }

  // Key tiles of row `tile_row`; `seen` (num_k_tiles entries) must hold no
  // entry equal to tile_row.
  int64_t count(int64_t tile_row, std::vector<int64_t>& seen) const {
    const KeyTileMap key_tiles = key_tiles_;
    const int64_t g = tile_row / num_q_tiles_;
    const MaskRows mask_rows = mask_rows_of(view_, tile_, tile_row % num_q_tiles_);
    int64_t count = 0;
    for (int64_t r = mask_rows.first; r <= mask_rows.last; ++r) {
      const int64_t row = view_.row(g, r);
      for (int64_t at = view_.row_begin(row), end = view_.row_end(row); at < end; ++at) {
        const int64_t kb = view_.kv_indices[at];
        for (int64_t u = key_tiles.first(kb), last = key_tiles.last(kb); u <= last; ++u)
          if (seen[u] != tile_row) {
            seen[u] = tile_row;
            ++count;
          }
      }
    }
    return count;
  }

  // Per-thread scratch of fill: present and full sub-block bits per key tile
  // (zero between rows) and the key tiles touched.
  struct Scratch {
    std::vector<uint64_t> present, full;
    std::vector<int32_t> touched;
  };
  Scratch scratch() const {
    return {std::vector<uint64_t>(static_cast<size_t>(num_k_tiles_), 0),
            std::vector<uint64_t>(static_cast<size_t>(num_k_tiles_), 0), {}};
  }

  // Writes row `tile_row`'s entries from grain.row_offsets[tile_row] on.
  void fill(int64_t tile_row, Scratch& s, TileGrainMask& grain) const {
    const KeyTileMap key_tiles = key_tiles_;
    const int64_t bq = view_.block_q;
    const int64_t g = tile_row / num_q_tiles_, t = tile_row % num_q_tiles_;
    const int64_t first_row = t * tile_.rows;
    const MaskRows mask_rows = mask_rows_of(view_, tile_, t);
    // Sub-blocks that hold at least one real (row, key) pair.
    const int64_t tile_sub_rows =
        ceil_div(std::min<int64_t>(tile_.rows, view_.q_len - first_row), int64_t{1} << sub_.row_shift);
    const uint64_t needed = sub_block_bits(tile_sub_rows, sub_.cols, sub_.cols);
    const uint64_t needed_last = sub_block_bits(tile_sub_rows, last_tile_sub_cols_, sub_.cols);
    uint64_t* present = s.present.data();
    uint64_t* full = s.full.data();
    for (int64_t r = mask_rows.first; r <= mask_rows.last; ++r) {
      // The tile's sub-rows inside mask row r, as bits of sub-block column 0.
      const int64_t sr0 = (std::max(r * bq, first_row) - first_row) >> sub_.row_shift;
      const int64_t sr1 = (std::min((r + 1) * bq, first_row + tile_.rows) - 1 - first_row) >> sub_.row_shift;
      const uint64_t rows_bits = sub_block_bits(sr1 - sr0 + 1, 1, sub_.cols) << (sr0 * sub_.cols);
      const int64_t row = view_.row(g, r);
      const auto row_first = static_cast<std::ptrdiff_t>(s.touched.size());
      for (int64_t at = view_.row_begin(row), end = view_.row_end(row); at < end; ++at) {
        const int64_t kb = view_.kv_indices[at];
        const uint64_t bit = rows_bits << key_tiles.sub_col(kb);
        const uint64_t full_bit = view_.kv_full[at] ? bit : 0;
        for (int64_t u = key_tiles.first(kb), last = key_tiles.last(kb); u <= last; ++u) {
          if (present[u] == 0) s.touched.push_back(static_cast<int32_t>(u));
          present[u] |= bit;
          full[u] |= full_bit;
        }
      }
      // A row's blocks are sorted, so are the tiles it added: merge them in.
      std::inplace_merge(s.touched.begin(), s.touched.begin() + row_first, s.touched.end());
    }
    auto at = static_cast<size_t>(grain.row_offsets[static_cast<size_t>(tile_row)]);
    for (const int32_t u : s.touched) {
      const uint64_t real = u == num_k_tiles_ - 1 ? needed_last : needed;
      grain.kv_indices[at] = u;
      grain.kv_full[at] = (full[u] & real) == real ? 1 : 0;
      grain.sub_present[at] = present[u];
      grain.sub_full[at] = full[u];
      present[u] = full[u] = 0;
      ++at;
    }
    s.touched.clear();
  }

 private:
  BlockMaskView view_;
  TileShape tile_;
  SubBlockGrid sub_;
  int64_t num_q_tiles_, num_k_tiles_;
  KeyTileMap key_tiles_;
  int64_t last_tile_sub_cols_;  // sub-block columns holding keys in the last key tile
};

// Key tiles per row of the mask's tile-grain form.
std::vector<int64_t> count_rows(const BlockMask& mask, const TileGrainRows& rows) {
  std::vector<int64_t> counts(static_cast<size_t>(rows.rows()));
#pragma omp parallel if (mask.num_blocks() >= kMinParallelBlocks)
  {
    std::vector<int64_t> seen(static_cast<size_t>(rows.num_k_tiles()), -1);
#pragma omp for schedule(dynamic, 16)
    for (int64_t tile_row = 0; tile_row < rows.rows(); ++tile_row)
      counts[static_cast<size_t>(tile_row)] = rows.count(tile_row, seen);
  }
  return counts;
}

// The mask at tile granularity (derive_tile_grain_mask) on sub-block grid
// `sub`, its rows' key tiles counted (count_rows): each row filled in place.
TileGrainMask derive(const BlockMask& mask, TileShape tile, const SubBlockGrid& sub,
                     const std::vector<int64_t>& counts) {
  const TileGrainRows rows(mask, tile, sub);
  require(static_cast<int64_t>(counts.size()) == rows.rows(), "CUDA backend: ", counts.size(),
          " row counts given for the ", rows.rows(), " rows of a mask at ", tile.rows, " x ", tile.cols,
          " tile granularity");
  TileGrainMask grain;
  grain.row_offsets.assign(counts.size() + 1, 0);
  std::partial_sum(counts.begin(), counts.end(), grain.row_offsets.begin() + 1);
  const auto entries = static_cast<size_t>(grain.row_offsets.back());
  grain.kv_indices.resize(entries);
  grain.kv_full.resize(entries);
  grain.sub_present.resize(entries);
  grain.sub_full.resize(entries);
#pragma omp parallel if (mask.num_blocks() >= kMinParallelBlocks)
  {
    TileGrainRows::Scratch scratch = rows.scratch();
#pragma omp for schedule(dynamic, 16)
    for (int64_t tile_row = 0; tile_row < rows.rows(); ++tile_row) rows.fill(tile_row, scratch, grain);
  }
  return grain;
}

// One item per row, rows far longer than the average split into pieces of
// about twice the average (at least kMinSplitTiles tiles; split_piece_tiles)
// or of whole_row_tiles where that is more, or, where the rows are fewer
// than min_items, every row into pieces of total / min_items tiles (at
// least min_piece_tiles), and the last tail_rows rows into pieces of
// tail_piece_tiles; ordered by length band (most work first), then mask head.
void split_and_order(const BlockMask& mask, TileShape tile, const PlanSplit& split, HostTilePlan& plan) {
  const std::vector<int64_t> work = row_work(mask, tile, plan);
  const int64_t tiles_per_entry = plan.derived ? 1 : mask.block_k() / tile.cols;
  const std::vector<int64_t>& offsets = plan.derived ? plan.derived->row_offsets : mask.row_offsets();
  const int64_t num_q_tiles = ceil_div(mask.q_len(), tile.rows);
  const int64_t total = std::accumulate(work.begin(), work.end(), int64_t{0});
  const int64_t rows = static_cast<int64_t>(work.size());
  int64_t piece_tiles = std::max(split_piece_tiles(total, rows), split.whole_row_tiles);
  if (split.min_items > rows)
    piece_tiles = std::min(piece_tiles, std::max(split.min_piece_tiles, ceil_div(total, split.min_items)));
  const int64_t first_tail_row = rows - std::min(split.tail_rows, rows);
  const std::vector<uint8_t>& full = plan.derived ? plan.derived->kv_full : mask.kv_full();
  const std::vector<int32_t>& indices = plan.derived ? plan.derived->kv_indices : mask.kv_indices();
  const int64_t num_k_tiles = ceil_div(mask.k_len(), tile.cols);
  const auto all_full = [&](int64_t begin, int64_t end) {
    int64_t tiles = 0;
    for (int64_t at = begin; at < end; ++at) {
      if (!full[static_cast<size_t>(at)]) return 0;
      tiles += std::min(tiles_per_entry, num_k_tiles - indices[static_cast<size_t>(at)] * tiles_per_entry);
    }
    return tiles >= 2 ? 1 : 0;
  };
  for (size_t r = 0; r < work.size(); ++r) {
    const int64_t g = static_cast<int64_t>(r) / num_q_tiles, t = static_cast<int64_t>(r) % num_q_tiles;
    // The row's entries in the walked arrays (derived rows are per tile; direct
    // rows are the mask row holding the tile).
    const int64_t mask_row = plan.derived ? static_cast<int64_t>(r) : g * mask.num_q_blocks() + t * tile.rows / mask.block_q();
    const int64_t begin = offsets[mask_row], end = offsets[mask_row + 1];
    const bool tail = static_cast<int64_t>(r) >= first_tail_row;
    const int64_t row_piece_tiles = tail ? std::min(piece_tiles, split.tail_piece_tiles) : piece_tiles;
    const int64_t pieces =
        work[r] > row_piece_tiles ? ceil_div(end - begin, ceil_div(row_piece_tiles, tiles_per_entry)) : 1;
    if (pieces == 1) {
      plan.items.push_back(WorkItem{begin, end, static_cast<int32_t>(r), -1, all_full(begin, end)});
      continue;
    }
    plan.split_rows.push_back(SplitRow{static_cast<int32_t>(r), plan.num_slots, static_cast<int32_t>(pieces)});
    for (int64_t n = 0; n < pieces; ++n) {
      const int64_t b = begin + n * (end - begin) / pieces, e = begin + (n + 1) * (end - begin) / pieces;
      plan.items.push_back(WorkItem{b, e, static_cast<int32_t>(r), plan.num_slots++, all_full(b, e)});
    }
  }
  std::stable_sort(plan.items.begin(), plan.items.end(),
                   [](const WorkItem& a, const WorkItem& b) { return a.end - a.begin > b.end - b.begin; });
  const auto length = [&](size_t n) { return plan.items[n].end - plan.items[n].begin; };
  plan.max_item_entries = plan.items.empty() ? 0 : length(0);
  plan.min_item_entries = plan.items.empty() ? 0 : length(plan.items.size() - 1);
  for (size_t n = 0; n < plan.items.size(); ++n) {
    const int64_t band_length = plan.band_first.empty() ? 0 : length(static_cast<size_t>(plan.band_first.back()));
    if (plan.band_first.empty() || (band_length > 0 && 3 * length(n) <= 2 * band_length))
      plan.band_first.push_back(static_cast<int32_t>(n));
    plan.total_item_entries += length(n);
  }
  plan.band_first.push_back(static_cast<int32_t>(plan.items.size()));
  // Within a band, one mask head after another (longest first within the
  // head): the items running at one time then read few heads' keys and values.
  const auto mask_head = [num_q_tiles](const WorkItem& item) { return item.row / num_q_tiles; };
  for (size_t k = 0; k + 1 < plan.band_first.size(); ++k)
    std::stable_sort(plan.items.begin() + plan.band_first[k], plan.items.begin() + plan.band_first[k + 1],
                     [&](const WorkItem& a, const WorkItem& b) { return mask_head(a) < mask_head(b); });
}

int64_t sub_blocks_per_tile(const BlockMask& mask, TileShape tile) {
  return (tile.rows / sub_side(mask.block_q(), tile.rows)) * (tile.cols / sub_side(mask.block_k(), tile.cols));
}

}  // namespace

bool tile_fits(const BlockMask& mask, TileShape tile) {
  return fits_side(mask.block_q(), tile.rows) && fits_side(mask.block_k(), tile.cols) &&
         sub_blocks_per_tile(mask, tile) <= 64 &&
         mask.num_heads() <= std::numeric_limits<int32_t>::max() / ceil_div(mask.q_len(), tile.rows);
}

void check_tile_fit(const BlockMask& mask, TileShape tile) {
  require(fits_side(mask.block_q(), tile.rows), "CUDA backend: mask block_q must be a multiple of ",
          tile.rows, " or a power of two, got ", mask.block_q());
  require(fits_side(mask.block_k(), tile.cols), "CUDA backend: mask block_k must be a multiple of ",
          tile.cols, " or a power of two, got ", mask.block_k());
  const int64_t subs = sub_blocks_per_tile(mask, tile);
  require(subs <= 64, "CUDA backend: mask blocks of ", mask.block_q(), " x ", mask.block_k(),
          " split a ", tile.rows, " x ", tile.cols, " kernel tile into ", subs,
          " pieces, more than the 64 supported");
  const int64_t num_q_tiles = ceil_div(mask.q_len(), tile.rows);
  require(mask.num_heads() <= std::numeric_limits<int32_t>::max() / num_q_tiles,
          "CUDA backend: mask heads (", mask.num_heads(), ") times query tiles (", num_q_tiles,
          ") must fit in 32 bits");
}

std::vector<int64_t> tile_grain_row_counts(const BlockMask& mask, TileShape tile) {
  check_tile_fit(mask, tile);
  if (is_direct(mask, tile)) return {};
  return count_rows(mask, TileGrainRows(mask, tile, sub_grid(mask, tile)));
}

int64_t tile_plan_key_tiles(const BlockMask& mask, TileShape tile, const std::vector<int64_t>& row_counts) {
  check_tile_fit(mask, tile);
  if (is_direct(mask, tile)) {
    const std::vector<int64_t> work = row_work(mask, tile, HostTilePlan{});
    return std::accumulate(work.begin(), work.end(), int64_t{0});
  }
  return std::accumulate(row_counts.begin(), row_counts.end(), int64_t{0});
}

std::vector<int32_t> partial_entry_slots(const std::vector<uint8_t>& kv_full) {
  require(kv_full.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "CUDA backend: ", kv_full.size(),
          " kept blocks exceed the 2^31 - 1 places of the partial blocks' table");
  std::vector<int32_t> slots(kv_full.size(), -1);
  int32_t next = 0;
  for (size_t e = 0; e < kv_full.size(); ++e)
    if (kv_full[e] == 0) slots[e] = next++;
  return slots;
}

int64_t tile_plan_key_tiles(const BlockMask& mask, TileShape tile) {
  return tile_plan_key_tiles(mask, tile, tile_grain_row_counts(mask, tile));
}

std::shared_ptr<const TileGrainMask> derive_tile_grain_mask(const BlockMask& mask, TileShape tile,
                                                            const std::vector<int64_t>& row_counts) {
  check_tile_fit(mask, tile);
  if (is_direct(mask, tile)) return nullptr;
  return std::make_shared<const TileGrainMask>(derive(mask, tile, sub_grid(mask, tile), row_counts));
}

std::shared_ptr<const TileGrainMask> derive_tile_grain_mask(const BlockMask& mask, TileShape tile) {
  return derive_tile_grain_mask(mask, tile, tile_grain_row_counts(mask, tile));
}

PlanSplit tail_split(int64_t rows, int64_t row_tiles, int64_t copies, int64_t resident) {
  require(rows >= 0 && row_tiles >= 0 && copies >= 0 && resident > 0, "CUDA backend: tail_split of ", rows,
          " rows of ", row_tiles, " key tiles times ", copies, " copies over ", resident, " CTAs");
  const int64_t units = rows * copies, remainder = units % resident;
  if (units < resident || remainder == 0) return {};
  PlanSplit split;
  split.tail_rows = ceil_div(remainder, copies);
  split.tail_piece_tiles =
      std::max(kMinTailPieceTiles, ceil_div(split.tail_rows * copies * row_tiles, 4 * resident));
  if (2 * split.tail_piece_tiles > row_tiles) return {};
  return split;
}

HostTilePlan make_tile_plan(const BlockMask& mask, TileShape tile, std::shared_ptr<const TileGrainMask> derived,
                            const PlanSplit& split) {
  check_tile_fit(mask, tile);
  require((derived != nullptr) == !is_direct(mask, tile), "CUDA backend: the tile plan of a ", mask.block_q(),
          " x ", mask.block_k(), " block mask for a ", tile.rows, " x ", tile.cols, " tile ",
          derived ? "walks the mask itself" : "needs the mask at tile granularity");
  require(split.tail_rows == 0 || split.tail_piece_tiles > 0, "CUDA backend: a plan splitting its last ",
          split.tail_rows, " rows needs tail_piece_tiles > 0, got ", split.tail_piece_tiles);
  HostTilePlan plan;
  plan.derived = std::move(derived);
  plan.sub = sub_grid(mask, tile);
  split_and_order(mask, tile, split, plan);
  return plan;
}

HostTilePlan make_tile_plan(const BlockMask& mask, TileShape tile, const PlanSplit& split) {
  return make_tile_plan(mask, tile, derive_tile_grain_mask(mask, tile), split);
}

}  // namespace spattn::cuda_detail
