// cuda/select/block_selector.hpp - dynamic block selection on the GPU.
//
// A BlockSelector is made once per (config, shape): the constructor checks
// the configuration, sizes and allocates every buffer (the per-row capacity is
// the static bound of the configuration: max_blocks when set, the most blocks
// topk can keep in topk mode, else all key blocks) and sets the kernels'
// attributes. run() only launches the three kernels of select_kernels.cuh on
// the stream: no allocation, no copy, no host synchronisation, so it can be
// captured in a CUDA graph. Its output, per batch element, is a BlockMaskView
// of device arrays with the semantics of the host select_blocks (mean
// pooling, or antidiagonal sampling with stride > 0). Scores are fp32 on the
// device and fp64 on the host, so rows whose choice hangs on a near tie may
// differ (docs/dynamic.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>

#include "select/select_rules.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/select.hpp"

namespace spattn::cuda_detail {

struct SelectShape {
  int64_t batch = 1, q_heads = 1, kv_heads = 1, q_len = 0, k_len = 0, head_dim = 0;
};

// "<what> (batch=..., q_heads=..., ..., block_q=..., block_k=...)": a
// selection's parameters, as the memory guards of its buffers name them.
std::string select_request(const char* what, const SelectConfig& config, const SelectShape& shape);

class BlockSelector {
 public:
  BlockSelector(const SelectConfig& config, const SelectShape& shape);
  ~BlockSelector();
  BlockSelector(const BlockSelector&) = delete;
  BlockSelector& operator=(const BlockSelector&) = delete;

  // q (B, Hq, Lq, D) and k (B, Hkv, Lk, D) on the device, fp32, fp16 or bf16,
  // of the constructor's shape. Queues the selection on `stream`: pool(),
  // score_select(), pack().
  void run(const TensorView& q, const TensorView& k, cudaStream_t stream);

  // The phases of run(), for callers that time them or skip the packing.
  // pool() computes the block scores' inputs from q and k: the pooled means,
  // or with stride > 0 the sampled block scores themselves.
  void pool(const TensorView& q, const TensorView& k, cudaStream_t stream);
  // Scores, orders and counts every row; writes the row counts and, per row,
  // `capacity` slots of kept key blocks (ascending) with their full flags.
  void score_select(cudaStream_t stream);
  // Packs the slots into the contiguous BlockMask arrays of view().
  void pack(cudaStream_t stream);

  // The mask of batch element b, device pointers (valid after run() completes).
  BlockMaskView view(int64_t b) const;
  // The same mask copied to the host (synchronises with the device).
  BlockMask download(int64_t b) const;

  // The slot layout written by score_select(), all batch elements: row r of
  // batch element b keeps counts()[b * rows + r] blocks, at entries
  // [(b * rows + r) * capacity, ... + count) of slots() and slot_full(), where
  // rows = mask_heads() * num_q_blocks.
  const int32_t* counts() const;
  const int32_t* slots() const;
  const uint8_t* slot_full() const;

  // With stride > 0: the block scores of the last pool(), (B, Hq, nqb, nkb)
  // fp32, -inf for a block with no sampled pair; entries past a row's allowed
  // blocks are not written. Null with mean pooling.
  const float* sampled_scores() const;

  int64_t capacity() const { return capacity_; }
  int64_t mask_heads() const { return mask_heads_; }

 private:
  void sample(const TensorView& q, const TensorView& k, cudaStream_t stream);

  struct Buffers;
  select_detail::SelectParams params_;
  SelectShape shape_;
  bool per_query_head_ = false;
  int64_t mask_heads_ = 0;
  int64_t capacity_ = 0;
  int64_t tile_rows_ = 1;   // query blocks per score_select_kernel CTA
  int64_t row_stride_ = 1;  // key-block slots per row in its shared memory
  size_t select_smem_bytes_ = 0;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace spattn::cuda_detail
