// tools/spattn/mask_inset.hpp - the token-level inset of a mask picture.
//
// A block picture shows which blocks a kernel visits, not which pairs inside
// a partial block are allowed: a dilated pattern's residue classes or a
// strided pattern's far diagonals look like solid partial blocks. The inset
// zooms on a small rectangle of (query, key) pairs, drawn pair by pair through
// BlockMask::allowed, where such structure is.
//
// Where: among the head's partial blocks (at most kInsetCandidates of them,
// evenly spread, when there are more) the one that keeps the smallest share
// of its pairs, ties going to the first in row-major order; no inset when
// every partial block examined keeps at least half of its pairs (causal
// diagonal blocks, for one, which the block picture already explains). The
// rectangle is up to 64 pairs a side (32 at least, or two blocks), about
// centred on the allowed pairs of that block, starting on a block boundary
// where a block is no larger than half of it, and moved inside the mask.
#pragma once

#include <cstdint>
#include <optional>

#include "png.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cli {

constexpr int64_t kInsetCandidates = 64;

// Queries [q0, q0 + rows) by keys [k0, k0 + cols).
struct PairRegion {
  int64_t q0 = 0, k0 = 0, rows = 0, cols = 0;
};

// The rectangle the inset of query head `head` of `query_heads` shows, or
// nothing when no inset is needed.
std::optional<PairRegion> inset_region(const BlockMask& mask, int64_t head, int64_t query_heads);

// `region` pair by pair, `pixels_per_pair` pixels a side each, in the token
// picture's colours, with block boundaries as grey lines.
RgbImage render_pair_region(const BlockMask& mask, int64_t head, int64_t query_heads, const PairRegion& region,
                            int64_t pixels_per_pair);

}  // namespace spattn::cli
