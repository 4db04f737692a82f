// cuda/cuda_build_mask.cpp - cuda_build_mask (spattn/cuda.hpp): a BlockMask
// built on the device, mirrored to the host and adopted as the mask's device
// copy (its plan cache's, device_mask_copy.hpp).
#include <cuda_runtime_api.h>

#include <memory>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.hpp"
#include "cuda/plan/device_mask_build.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "plan/plan_cache.hpp"
#include "spattn/cuda.hpp"

namespace spattn {
namespace detail {

// The one way to wrap arrays that a builder made valid by construction.
struct BlockMaskAssembly {
  static BlockMask built(const BlockMaskView& v, std::vector<int64_t> row_offsets,
                         std::vector<int32_t> kv_indices, std::vector<uint8_t> kv_full,
                         std::shared_ptr<const Pattern> pattern) {
    return BlockMask(BlockMask::BuiltPlan{}, v.q_len, v.k_len, v.block_q, v.block_k, v.num_heads,
                     std::move(row_offsets), std::move(kv_indices), std::move(kv_full), std::move(pattern));
  }
};

}  // namespace detail

namespace {

using cuda_detail::check_cuda;

template <typename T>
std::vector<T> copy_to_host(const T* device, int64_t count, cudaStream_t stream) {
  std::vector<T> host(static_cast<size_t>(count));
  if (count > 0)
    check_cuda(cudaMemcpyAsync(host.data(), device, static_cast<size_t>(count) * sizeof(T),
                               cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync of a device-built mask array");
  return host;
}

}  // namespace

BlockMask cuda_build_mask(const Pattern& pattern, const MaskShape& shape, void* stream) {
  // No query or no key blocks: nothing for the device walk to count (nor a
  // grid to launch); the host builds the empty plan in time linear in its rows.
  if (shape.q_len == 0 || shape.k_len == 0) return BlockMask::build(pattern, shape);
  const auto s = static_cast<cudaStream_t>(stream);
  auto exprs = std::make_shared<const cuda_detail::DeviceExprs>(pattern, s);
  std::shared_ptr<const cuda_detail::DeviceMaskArrays> arrays =
      cuda_detail::build_mask_on_device(pattern, shape, *exprs, s);
  const BlockMaskView& v = arrays->view();
  std::vector<int64_t> row_offsets = copy_to_host(v.row_offsets, arrays->num_rows() + 1, s);
  std::vector<int32_t> kv_indices = copy_to_host(v.kv_indices, arrays->num_blocks(), s);
  std::vector<uint8_t> kv_full = copy_to_host(v.kv_full, arrays->num_blocks(), s);
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize after the mask copy");
  BlockMask mask = detail::BlockMaskAssembly::built(v, std::move(row_offsets), std::move(kv_indices),
                                                    std::move(kv_full), std::make_shared<Pattern>(pattern));
  mask.plan_cache().adopt_device_copy(
      cuda_detail::current_device(),
      std::make_shared<const cuda_detail::DeviceMaskCopy>(v, std::move(exprs), std::move(arrays)));
  return mask;
}

}  // namespace spattn
