// cuda/plan/device_mask_build.hpp - BlockMask arrays built on the GPU.
//
// The device twin of BlockMask::build: the same arrays (row_offsets, sorted
// kv_indices, kv_full), block for block, made by kernels that classify blocks
// with the same closed forms (pattern/block_classify.hpp). Three steps on one
// stream: count the kept blocks of every (mask head, query block) row, scan
// the counts (CUB), fill. The host waits once, between scan and fill, for the
// total number of kept blocks: the arrays are allocated at their exact size
// (a dense bound would cost 5 bytes per block of the whole L x L grid, 335 MB
// per head at 1M tokens and block 128).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "cuda/common/device_buffer.hpp"
#include "cuda/plan/device_exprs.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

// The arrays of one device-built mask (owned; freed on destruction).
class DeviceMaskArrays {
 public:
  DeviceMaskArrays() = default;
  DeviceMaskArrays(const DeviceMaskArrays&) = delete;
  DeviceMaskArrays& operator=(const DeviceMaskArrays&) = delete;

  // Sizes and device pointers, as BlockMask::view() gives them on the host.
  const BlockMaskView& view() const { return view_; }
  int64_t num_rows() const { return view_.num_heads * view_.num_q_blocks; }
  int64_t num_blocks() const { return num_blocks_; }

 private:
  friend std::unique_ptr<DeviceMaskArrays> build_mask_on_device(const Pattern&, const MaskShape&,
                                                                const DeviceExprs&, cudaStream_t);
  BlockMaskView view_;
  int64_t num_blocks_ = 0;
  DevicePtr row_offsets_;  // int64_t
  DevicePtr kv_indices_;   // int32_t
  DevicePtr kv_full_;      // uint8_t
};

// Builds the plan of `pattern` for `shape` on the current device; `exprs` is
// the pattern on that device. Checks its arguments as BlockMask::build does.
// Queues its work on `stream` and waits for it once, for the block count; the
// arrays are complete when the work queued so far on `stream` is.
std::unique_ptr<DeviceMaskArrays> build_mask_on_device(const Pattern& pattern, const MaskShape& shape,
                                                       const DeviceExprs& exprs, cudaStream_t stream);

}  // namespace spattn::cuda_detail
