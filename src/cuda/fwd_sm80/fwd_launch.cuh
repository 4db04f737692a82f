// cuda/fwd_sm80/fwd_launch.cuh - the launch of one instantiation of the
// portable forward kernel: raises the dynamic shared-memory limit and starts
// one CTA per (work item, batch, head in the mask head) on the stream, in the
// order of common/work_units.hpp, then the merge of split rows; the permuted
// pass of a dilated split runs the kernel's own instantiation for it. Also
// the plan's table of keep bits for the instantiation's tile
// (keep_bits_table.cuh), made when the plan is.
#pragma once

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/keep_bits_table.cuh"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm80/fwd_kernel.cuh"
#include "cuda/fwd_sm80/fwd_sm80.hpp"

namespace spattn::cuda_detail {

template <typename T, int kHeadDim, int kTileCols>
void launch_fwd_sm80(const FwdParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<T, kHeadDim, kTileCols>;
  static_assert(Tr::kBlockM == sm80_tile(kHeadDim, kTileCols == kSm80WideTile.cols).rows &&
                    Tr::kBlockN == sm80_tile(kHeadDim, kTileCols == kSm80WideTile.cols).cols,
                "tile plan and kernel tile agree");
  const auto kernel = p.merge_into_out ? fwd_sm80_kernel<Tr, true> : fwd_sm80_kernel<Tr, false>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes, "fwd_sm80");
  const int64_t ctas = p.plan.num_items * launch_copies(p);
  require(ctas <= 0x7fffffff, "CUDA backend: ", ctas, " work items exceed the grid limit");
  // At least kMinBlocksPerSm CTAs run on each SM at a time (two; one at D =
  // 256): the concurrency the order's tail estimate assumes.
  const DeviceInfo& device = current_device_info();
  const UnitOrder order =
      launch_unit_order(p, device, int64_t{device.sms} * Tr::kMinBlocksPerSm, kHeadDim, sizeof(T));
  kernel<<<static_cast<unsigned>(ctas), Tr::kThreads, Tr::kSmemBytes, stream>>>(p, order);
  check_launch("fwd_sm80 kernel launch");
  if (p.plan.num_split_rows > 0) launch_split_combine<T>(p, Tr::kBlockM, stream);
}

template <typename T, int kHeadDim, int kTileCols>
DevicePtr make_fwd_sm80_keep_bits(FwdParams& p, cudaStream_t stream) {
  using Tr = FwdTraits<T, kHeadDim, kTileCols>;
  return make_keep_bits_table<Tr, Tr::kThreads>(p, stream);
}

}  // namespace spattn::cuda_detail
