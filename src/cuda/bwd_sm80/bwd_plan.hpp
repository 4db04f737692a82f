// cuda/bwd_sm80/bwd_plan.hpp - the backward plan: what the backward kernels
// read about the mask (BwdPlanView), made on the host from a BlockMask.
//
// make_backward_lists derives it as host arrays (plain C++): the walked
// query-major lists (the mask's own where its blocks are multiples of the
// 64 x 64 tile, else the mask at tile granularity with sub-block bits,
// cuda/plan/tile_plan.hpp), their key-major transpose (key_major_plan, each
// entry with its query-major position), and the tiles of each side ordered
// by descending work (the CTAs' launch order). make_backward_plan uploads
// them to the current device into a BackwardPlan that owns the device
// arrays. The plan depends on the mask alone (not on batch, heads or
// tensors), so one plan serves every call with that mask.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "pattern/key_major_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

class DeviceExprs;

// Throws spattn::Error naming the block sizes unless the backward kernels'
// tile takes the mask: each block side a multiple of 64 or a power of two,
// at most 64 blocks per 64 x 64 tile.
void check_backward_mask(const BlockMask& mask);

// The plan as host arrays. `mask` must outlive it (its own lists are walked
// where `derived` is null).
struct BackwardLists {
  const BlockMask* mask = nullptr;
  std::shared_ptr<const TileGrainMask> derived;  // null: the mask's own lists
  KeyMajorPlan columns;                          // the walked lists, key-major
  std::vector<int32_t> q_tile_order, k_tile_order;
  BwdPlanView scalars;  // the view's sizes and sub-block grid, no pointers

  // The view over these host arrays (and the pattern's host expressions):
  // the kernels' plan, readable on the host (the tests walk it).
  BwdPlanView host_view() const;
};

BackwardLists make_backward_lists(const BlockMask& mask);

// The plan's arrays and the pattern's expressions on one device.
class BackwardPlan {
 public:
  BackwardPlan();
  ~BackwardPlan();
  BackwardPlan(BackwardPlan&&) noexcept;
  BackwardPlan& operator=(BackwardPlan&&) noexcept;

  const BwdPlanView& view() const { return view_; }

 private:
  friend BackwardPlan make_backward_plan(const BlockMask& mask, cudaStream_t stream);
  std::vector<DevicePtr> arrays_;
  std::unique_ptr<DeviceExprs> exprs_;
  BwdPlanView view_;
};

// make_backward_lists, uploaded to the current device on `stream`; returns
// once the copies are done (synchronous: the host arrays go with the call).
BackwardPlan make_backward_plan(const BlockMask& mask, cudaStream_t stream);

}  // namespace spattn::cuda_detail
