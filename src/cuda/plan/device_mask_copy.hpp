// cuda/plan/device_mask_copy.hpp - a BlockMask on one CUDA device: its arrays
// and its pattern's per-head expressions (tables rewritten to device copies),
// as the kernels read them (DeviceMaskView).
//
// Made once per (mask, device) and shared by every plan of the mask on that
// device through the mask's plan cache (plan/plan_cache.hpp); a plan's own
// masks (the two passes of a dilated split) are copies owned by the plan. A
// mask built on the device (cuda_build_mask) is adopted as it is.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "cuda/common/device_buffer.hpp"
#include "cuda/plan/device_exprs.hpp"
#include "cuda/plan/device_plan_view.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

class DeviceMaskCopy {
 public:
  // Copies `mask` to the current device through `stream` and waits for it.
  DeviceMaskCopy(const BlockMask& mask, cudaStream_t stream);
  // Adopts `blocks` (device arrays `owner` keeps alive) and `exprs`.
  DeviceMaskCopy(const BlockMaskView& blocks, std::shared_ptr<const DeviceExprs> exprs,
                 std::shared_ptr<const void> owner);
  DeviceMaskCopy(const DeviceMaskCopy&) = delete;
  DeviceMaskCopy& operator=(const DeviceMaskCopy&) = delete;

  const DeviceMaskView& view() const { return view_; }

 private:
  std::vector<DevicePtr> arrays_;
  std::shared_ptr<const DeviceExprs> exprs_;
  std::shared_ptr<const void> owner_;
  DeviceMaskView view_;
};

// `mask`'s copy on the current device, from its plan cache (made there on
// first use, through `stream`).
std::shared_ptr<const DeviceMaskCopy> shared_device_copy(const BlockMask& mask, cudaStream_t stream);

// A device copy of `count` values at `host` kept in `arrays`; null for none.
template <typename T>
const T* upload(std::vector<DevicePtr>& arrays, const T* host, int64_t count, cudaStream_t stream);
template <typename T>
const T* upload(std::vector<DevicePtr>& arrays, const std::vector<T>& host, cudaStream_t stream) {
  return upload(arrays, host.data(), static_cast<int64_t>(host.size()), stream);
}

// The current CUDA device.
int current_device();

}  // namespace spattn::cuda_detail
