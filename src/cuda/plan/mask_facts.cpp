// cuda/plan/mask_facts.cpp - the planner's facts about a mask, each derived
// on its first request (see mask_facts.hpp).
#include "cuda/plan/mask_facts.hpp"

namespace spattn::cuda_detail {
namespace {

// The value kept for `tile` in `entries`, made by `make` on first use.
template <typename T, typename Make>
const T& per_tile(std::vector<std::pair<TileShape, T>>& entries, TileShape tile, const Make& make) {
  for (const auto& [made_for, value] : entries)
    if (made_for == tile) return value;
  entries.emplace_back(tile, make());
  return entries.back().second;
}

}  // namespace

const std::vector<int64_t>& MaskFacts::row_counts(TileShape tile) {
  return per_tile(row_counts_, tile, [&] { return tile_grain_row_counts(mask_, tile); });
}

int64_t MaskFacts::key_tiles(TileShape tile) {
  return per_tile(key_tiles_, tile, [&] { return tile_plan_key_tiles(mask_, tile, row_counts(tile)); });
}

std::shared_ptr<const TileGrainMask> MaskFacts::tile_grain(TileShape tile) {
  return per_tile(grains_, tile, [&] { return derive_tile_grain_mask(mask_, tile, row_counts(tile)); });
}

std::shared_ptr<const DilatedSplit> MaskFacts::dilated_split(TileShape tile) {
  return per_tile(splits_, tile, [&] { return make_dilated_split(mask_, tile); });
}

}  // namespace spattn::cuda_detail
