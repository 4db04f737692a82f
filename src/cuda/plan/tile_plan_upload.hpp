// cuda/plan/tile_plan_upload.hpp - a host tile plan (tile_plan.hpp) copied to
// the device as the kernels read it (DeviceTilePlanView), its arrays owned by
// the caller's plan (cuda_plan.hpp).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "cuda/common/device_buffer.hpp"
#include "cuda/plan/device_plan_view.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

// `host`, the plan of `tile` over `mask` (made over host.derived where the
// mask's blocks are not multiples of the tile), on the current device: the
// walked arrays are the mask's device copy `on_device` or an upload of
// host.derived, each walked entry's place among the partial ones is
// uploaded, and so are the items, bands and split rows. Every upload is
// kept in `arrays` and queued on `stream` (the caller waits for it).
DeviceTilePlanView upload_tile_plan(const BlockMask& mask, const DeviceMaskView& on_device, TileShape tile,
                                    const HostTilePlan& host, std::vector<DevicePtr>& arrays, cudaStream_t stream);

}  // namespace spattn::cuda_detail
