// tools/spattn/mask_image.hpp - the panels of the mask pictures: a BlockMask
// drawn block by block or pair by pair.
//
// Rows = queries (top = first), columns = keys (left = first):
//  - the block panel: one cell per (query block, key block); full blocks in
//    dark blue, partial blocks in orange, skipped blocks white, with a thin
//    grid when cells are at least kGridMinCell pixels;
//  - the token panel: one cell per (query, key) pair, read through
//    BlockMask::allowed; allowed pairs dark blue, pairs inside visited blocks
//    but masked out light blue (the work a kernel does in vain), the rest white.
// Cells are scaled up by an integer factor (nearest neighbour) so that the
// longer side approaches `max_side` pixels; larger grids are scaled down, a
// pixel showing the strongest block class (block panel) or the mix of pair
// classes (token panel) under it. mask_figure.hpp puts title, axes and legend
// around them.
#pragma once

#include <cstdint>

#include "png.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cli {

constexpr int64_t kGridMinCell = 6;

// The colours of every mask picture (the legends name them).
constexpr Rgb kMaskEmpty{255, 255, 255};    // skipped block / pair outside visited blocks
constexpr Rgb kMaskFull{33, 82, 150};       // full block / allowed pair
constexpr Rgb kMaskPartial{240, 150, 40};   // partial block
constexpr Rgb kMaskWasted{190, 214, 238};   // masked-out pair inside a visited block
constexpr Rgb kMaskGrid{120, 120, 120};     // block boundaries, blended in to show on any colour
constexpr double kMaskGridWeight = 0.3;
constexpr Rgb kInsetMark{190, 0, 190};       // where the inset's pairs are, on the block panel

// Blocks a query head visits: all kept ones and the full ones among them.
struct HeadBlocks {
  int64_t kept = 0;
  int64_t full = 0;
};
HeadBlocks count_head_blocks(const BlockMask& mask, int64_t head, int64_t query_heads);

// A drawn panel and how many pixels a cell (a block, or a pair) spans along
// each axis (below 1 when the grid was scaled down).
struct MaskPanel {
  RgbImage image;
  double pixels_per_cell = 1.0;
};

// Block panel for query head `head` of `query_heads`.
MaskPanel render_block_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side);
// Token panel for query head `head` of `query_heads` (Lq x Lk cells); adds the
// head's allowed pairs to *allowed_pairs when given.
MaskPanel render_token_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side,
                            int64_t* allowed_pairs = nullptr);

// Bytes the two panels take for a mask of these lengths and block sizes (the
// token panel's only when it is drawn, see kTokenPictureMaxPairs): their
// pixels and the per-pixel classes they are painted from.
int64_t mask_panels_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side);

// The token panel is drawn only up to this many (query, key) pairs.
constexpr int64_t kTokenPictureMaxPairs = int64_t{2048} * 2048;

}  // namespace spattn::cli
