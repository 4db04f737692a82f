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
#include <ostream>
#include <string>

#include "png.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cli {

constexpr int64_t kGridMinCell = 6;

// Blocks a query head visits: all kept ones and the full ones among them.
struct HeadBlocks {
  int64_t kept = 0;
  int64_t full = 0;
};
HeadBlocks count_head_blocks(const BlockMask& mask, int64_t head, int64_t query_heads);

// Block picture for query head `head` of `query_heads`.
RgbImage render_block_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side);
// Token picture for query head `head` of `query_heads` (Lq x Lk cells).
RgbImage render_token_mask(const BlockMask& mask, int64_t head, int64_t query_heads, int64_t max_side);

// Bytes write_mask_pictures takes for a mask of these lengths and block sizes:
// the pictures' pixels and the per-pixel classes they are painted from.
int64_t mask_pictures_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side);

// Where the token picture of block picture `out` goes: its stem + "_tokens.png".
std::string token_picture_path(const std::string& out);
// Writes the block picture to `out` and, when Lq * Lk <= 2048 * 2048, the
// token picture to token_picture_path(out); reports each file on `os`.
void write_mask_pictures(std::ostream& os, const BlockMask& mask, int64_t head, int64_t query_heads,
                         int64_t max_side, const std::string& out);

}  // namespace spattn::cli
