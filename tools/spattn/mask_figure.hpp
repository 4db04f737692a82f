// tools/spattn/mask_figure.hpp - the pictures `spattn mask` writes.
//
// Each picture is a panel of mask_image.hpp with, around it: a title (the
// pattern and its parameters, the lengths, the blocks, the head drawn and
// what it keeps), axes in tokens (bottom, left) and in blocks (top, right)
// with tick marks and numbers, and a legend of the colours. The block
// picture also gets the token-level inset of mask_inset.hpp, pair by pair,
// next to it, its region outlined on the block panel, when some partial block
// hides structure finer than a block (a dilated or strided pattern).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "spattn/block_mask.hpp"

namespace spattn::cli {

// Where the token picture of block picture `out` goes: its stem + "_tokens.png".
std::string token_picture_path(const std::string& out);

// Bytes write_mask_pictures takes for a mask of these lengths and block sizes.
int64_t mask_pictures_bytes(int64_t q_len, int64_t k_len, int64_t block_q, int64_t block_k, int64_t max_side);

// Writes the block picture of query head `head` of `query_heads` to `out`
// and, when Lq * Lk <= kTokenPictureMaxPairs, the token picture to
// token_picture_path(out); reports each file on `os`. `pattern` is the
// title's first line (the pattern and its parameters); the panels' longer
// side is about `max_side` pixels.
void write_mask_pictures(std::ostream& os, const BlockMask& mask, int64_t head, int64_t query_heads,
                         int64_t max_side, const std::string& out, const std::string& pattern);

}  // namespace spattn::cli
