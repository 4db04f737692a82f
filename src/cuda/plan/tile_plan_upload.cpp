// cuda/plan/tile_plan_upload.cpp - a host tile plan on the device (see
// tile_plan_upload.hpp).
#include "cuda/plan/tile_plan_upload.hpp"

#include <algorithm>

#include "cuda/plan/device_mask_copy.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

DeviceTilePlanView upload_tile_plan(const BlockMask& mask, const DeviceMaskView& on_device, TileShape tile,
                                    const HostTilePlan& host, std::vector<DevicePtr>& arrays, cudaStream_t stream) {
  using pattern_math::ceil_div;
  DeviceTilePlanView view;
  view.blocks = on_device.blocks;
  const std::vector<uint8_t>* walked_full = &mask.kv_full();
  if (const TileGrainMask* grain = host.derived.get()) {
    view.blocks.block_q = tile.rows;
    view.blocks.block_k = tile.cols;
    view.blocks.num_q_blocks = ceil_div(mask.q_len(), tile.rows);
    view.blocks.num_k_blocks = ceil_div(mask.k_len(), tile.cols);
    view.blocks.row_offsets = upload(arrays, grain->row_offsets, stream);
    view.blocks.kv_indices = upload(arrays, grain->kv_indices, stream);
    view.blocks.kv_full = upload(arrays, grain->kv_full, stream);
    view.sub_present = upload(arrays, grain->sub_present, stream);
    view.sub_full = upload(arrays, grain->sub_full, stream);
    walked_full = &grain->kv_full;
  }
  const std::vector<int32_t> slots = partial_entry_slots(*walked_full);
  view.partial_slots = upload(arrays, slots, stream);
  view.num_entries = static_cast<int64_t>(slots.size());
  view.num_partial_entries = std::count_if(slots.begin(), slots.end(), [](int32_t slot) { return slot >= 0; });
  view.sub = host.sub;
  view.items = upload(arrays, host.items, stream);
  view.num_items = static_cast<int64_t>(host.items.size());
  view.band_first = upload(arrays, host.band_first, stream);
  view.num_bands = static_cast<int64_t>(host.band_first.size()) - 1;
  view.max_item_entries = host.max_item_entries;
  view.min_item_entries = host.min_item_entries;
  view.total_item_entries = host.total_item_entries;
  view.split_rows = upload(arrays, host.split_rows, stream);
  view.num_split_rows = static_cast<int64_t>(host.split_rows.size());
  view.num_slots = host.num_slots;
  view.num_q_tiles = ceil_div(mask.q_len(), tile.rows);
  view.num_k_tiles = ceil_div(mask.k_len(), tile.cols);
  view.tile_rows = tile.rows;
  view.tile_cols = tile.cols;
  return view;
}

}  // namespace spattn::cuda_detail
