// cuda/select/dynamic_attention.hpp - select-then-attend on the device: the
// BlockSelector's arrays handed straight to the fused forward kernel.
//
// The forward kernel (sm90 where cuda_attention would choose it and the block
// sizes are multiples of its tile, sm90_tile, else sm80) walks a mask whose
// block sizes are multiples of its tile through its own arrays and reaches a
// row's entries only through the work items' [begin, end) ranges. So it can
// read the selector's slot layout directly (fixed `capacity` entries per
// row, the first `count` used: kv_indices = slots, kv_full = slot full flags)
// and the packing into contiguous BlockMask arrays is skipped. The work
// items, one per (mask head, query tile), none split, are written by
// items_kernel from the device row counts after every selection and ordered
// by a CUB radix sort per batch element: length classes longest first (rows
// of very different length, as a mass threshold selects them, spread evenly
// over the persistent grid), head by head inside a class (one head's keys
// and values in L2 at a time). Blocks that causality cuts are partial and
// take the causal predicate from the device copy of a causal BlockMask of the
// same shape (`shape_mask`, made once, also used to validate the tensors).
// select() and attend() allocate, copy and wait for nothing: they can be
// captured in a CUDA graph once the object exists.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/common/fwd_params.hpp"
#include "cuda/select/block_selector.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/select.hpp"

namespace spattn::cuda_detail {

class DynamicAttention {
 public:
  // Chooses the forward kernel (use_sm90 in the .cu file). Throws
  // spattn::Error unless block_q is a multiple of the kernel tile's rows,
  // block_k of its columns, and the head dim is built.
  DynamicAttention(const SelectConfig& config, const SelectShape& shape);
  ~DynamicAttention();
  DynamicAttention(const DynamicAttention&) = delete;
  DynamicAttention& operator=(const DynamicAttention&) = delete;

  // The pattern mask of the selection's shape (causal or dense, one head):
  // what the tensors are validated against.
  const BlockMask& shape_mask() const { return shape_mask_; }

  // Queues the selection and the work items on `stream`: pool(), score_select(), make_items().
  void select(const TensorView& q, const TensorView& k, cudaStream_t stream);
  void pool(const TensorView& q, const TensorView& k, cudaStream_t stream) { selector_->pool(q, k, stream); }
  void score_select(cudaStream_t stream) { selector_->score_select(stream); }
  void make_items(cudaStream_t stream);

  // Queues the forward kernel on the last selection, one launch per batch
  // element; `p` holds the whole batch's tensors (from the backend's checks).
  void attend(const FwdParams& p, DType dtype, cudaStream_t stream) const;

  // The last selection's mask of batch element b on the host (packs it, then
  // waits for the device).
  BlockMask mask(int64_t b);

 private:
  struct Items;
  SelectShape shape_;
  std::unique_ptr<BlockSelector> selector_;
  BlockMask shape_mask_;
  bool sm90_ = false;  // the forward kernel: sm90 or sm80
  TileShape tile_;     // its tile
  DeviceMaskView predicate_;  // shape_mask_'s expressions on the device
  int64_t num_q_tiles_ = 0, num_k_tiles_ = 0;
  std::unique_ptr<Items> items_;
};

}  // namespace spattn::cuda_detail
