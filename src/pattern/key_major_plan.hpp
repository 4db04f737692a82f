// key_major_plan.hpp - the block mask transposed: for each (mask head, key
// block), the query blocks that keep it.
//
// The forward pass walks a mask row by row (query block -> its key blocks);
// the backward pass accumulates dk and dv per key block and needs the other
// direction. key_major_plan() builds it by a counting sort over the kept
// blocks (time and memory proportional to them, never a dense block matrix):
// column c = mask_head * num_k_blocks + kb lists its query blocks in
// ascending order, each with its full flag and its position in the forward
// lists (kv_indices[forward_position] == kb).
#pragma once

#include <cstdint>
#include <vector>

#include "spattn/block_mask.hpp"

namespace spattn {

struct KeyMajorPlan {
  int64_t num_heads = 0, num_k_blocks = 0;
  std::vector<int64_t> col_offsets;        // num_heads * num_k_blocks + 1
  std::vector<int32_t> q_indices;          // query blocks, ascending per column
  std::vector<uint8_t> q_full;             // 1 = full, 0 = partial
  std::vector<int64_t> forward_position;   // the entry's index in the forward lists

  int64_t col(int64_t mask_head, int64_t kb) const { return mask_head * num_k_blocks + kb; }
  int64_t col_begin(int64_t c) const { return col_offsets[c]; }
  int64_t col_end(int64_t c) const { return col_offsets[c + 1]; }
};

KeyMajorPlan key_major_plan(const BlockMaskView& plan);

}  // namespace spattn
