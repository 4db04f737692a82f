// tools/spattn/mask_image.hpp - pictures of a BlockMask.
//
// Two pictures, rows = queries (top = first), columns = keys (left = first):
//  - the block picture: one cell per (query block, key block); full blocks in
//    dark blue, partial blocks in orange, skipped blocks white, with a thin
//    grid when cells are at least kGridMinCell pixels;
//  - the token picture: one cell per (query, key) pair, read through
//    BlockMask::allowed; allowed pairs dark blue, pairs inside visited blocks
//    but masked out light blue (the work a kernel does in vain), the rest white.
// Cells are scaled up by an integer factor (nearest neighbour) so that the
// longer side approaches `max_side` pixels; larger grids are scaled down, a
// pixel showing the strongest block class (block picture) or the mix of pair
// classes (token picture) under it.
#pragma once

#include <cstdint>

#include "png.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cli {

constexpr int64_t kGridMinCell = 6;

// Block picture for query head `head` of `query_heads`.
RgbImage render_block_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side);
// Token picture for query head `head` of `query_heads` (Lq x Lk cells).
RgbImage render_token_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side);

}  // namespace spattn::cli
