// cuda/plan/mask_facts.hpp - what the CUDA planner weighs about a mask,
// derived once per planning and only where a decision asks for it: the key
// tiles a kernel tile's plan visits, the mask at a tile's granularity, and
// the dilated split for a tile (kernel_choice.hpp, cuda_plan.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cuda/plan/dilated_split.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

class MaskFacts {
 public:
  explicit MaskFacts(const BlockMask& mask) : mask_(mask) {}
  const BlockMask& mask() const { return mask_; }

  // tile_plan_key_tiles of `tile` (the mask must fit it).
  int64_t key_tiles(TileShape tile);
  // derive_tile_grain_mask of `tile`: null where the tile walks the mask itself.
  std::shared_ptr<const TileGrainMask> tile_grain(TileShape tile);
  // make_dilated_split for `tile`: null where the pattern has none.
  std::shared_ptr<const DilatedSplit> dilated_split(TileShape tile);

 private:
  const std::vector<int64_t>& row_counts(TileShape tile);

  const BlockMask& mask_;
  std::vector<std::pair<TileShape, std::vector<int64_t>>> row_counts_;
  std::vector<std::pair<TileShape, int64_t>> key_tiles_;
  std::vector<std::pair<TileShape, std::shared_ptr<const TileGrainMask>>> grains_;
  std::vector<std::pair<TileShape, std::shared_ptr<const DilatedSplit>>> splits_;
};

}  // namespace spattn::cuda_detail
