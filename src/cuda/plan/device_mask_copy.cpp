// cuda/plan/device_mask_copy.cpp - a BlockMask's copy on a device (see
// device_mask_copy.hpp).
#include "cuda/plan/device_mask_copy.hpp"

#include "cuda/common/cuda_check.hpp"
#include "plan/plan_cache.hpp"

namespace spattn::cuda_detail {

template <typename T>
const T* upload(std::vector<DevicePtr>& arrays, const T* host, int64_t count, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  if (bytes == 0) return nullptr;
  arrays.push_back(device_alloc(bytes, "cudaMalloc of a plan array"));
  // A pageable source is staged before cudaMemcpyAsync returns.
  check_cuda(cudaMemcpyAsync(arrays.back().get(), host, bytes, cudaMemcpyHostToDevice, stream),
             "cudaMemcpyAsync of a plan array");
  return static_cast<const T*>(arrays.back().get());
}

template const int64_t* upload(std::vector<DevicePtr>&, const int64_t*, int64_t, cudaStream_t);
template const int32_t* upload(std::vector<DevicePtr>&, const int32_t*, int64_t, cudaStream_t);
template const uint8_t* upload(std::vector<DevicePtr>&, const uint8_t*, int64_t, cudaStream_t);
template const uint64_t* upload(std::vector<DevicePtr>&, const uint64_t*, int64_t, cudaStream_t);
template const WorkItem* upload(std::vector<DevicePtr>&, const WorkItem*, int64_t, cudaStream_t);
template const SplitRow* upload(std::vector<DevicePtr>&, const SplitRow*, int64_t, cudaStream_t);

DeviceMaskCopy::DeviceMaskCopy(const BlockMask& mask, cudaStream_t stream) {
  BlockMaskView v = mask.view();
  v.row_offsets = upload(arrays_, mask.row_offsets(), stream);
  v.kv_indices = upload(arrays_, mask.kv_indices(), stream);
  v.kv_full = upload(arrays_, mask.kv_full(), stream);
  view_.blocks = v;
  if (mask.pattern()) {
    exprs_ = std::make_shared<const DeviceExprs>(*mask.pattern(), stream);
    view_.exprs = exprs_->exprs();
    view_.num_exprs = exprs_->num_exprs();
  }
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after the mask upload");
}

DeviceMaskCopy::DeviceMaskCopy(const BlockMaskView& blocks, std::shared_ptr<const DeviceExprs> exprs,
                               std::shared_ptr<const void> owner)
    : exprs_(std::move(exprs)), owner_(std::move(owner)) {
  view_.blocks = blocks;
  if (exprs_) {
    view_.exprs = exprs_->exprs();
    view_.num_exprs = exprs_->num_exprs();
  }
}

std::shared_ptr<const DeviceMaskCopy> shared_device_copy(const BlockMask& mask, cudaStream_t stream) {
  return mask.plan_cache().device_copy(current_device(),
                                       [&] { return std::make_shared<const DeviceMaskCopy>(mask, stream); });
}

int current_device() {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

}  // namespace spattn::cuda_detail
