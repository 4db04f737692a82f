// python/csrc/packed_mask.hpp - a BlockMask as the Python package hands it to
// the operators: one int64 tensor (on the mask's device) holding a header and
// the mask's arrays and encoded pattern, each section padded to whole words.
//
//   header (kHeaderWords): version, q_len, k_len, block_q, block_k, num_heads,
//                          num_blocks, code words, table_i32 entries, table_i64 entries
//   row_offsets           num_heads * ceil(q_len / block_q) + 1 int64
//   kv_indices            num_blocks int32
//   kv_full               num_blocks uint8
//   code                  the pattern's code words (spattn/pattern_codec.hpp)
//   table_i32, table_i64  the pattern's tables
//
// python/spattn/block_mask.py reads the sections as views (its _sections
// mirrors PackedHeader::sections); the operators decode a packed tensor once
// and keep the BlockMask (mask_registry.hpp).
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "spattn/block_mask.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {

constexpr int64_t kPackedVersion = 1;
constexpr int64_t kHeaderWords = 10;

struct PackedHeader {
  int64_t q_len = 0, k_len = 0, block_q = 0, block_k = 0, num_heads = 0;
  int64_t num_blocks = 0, code_words = 0, table_i32 = 0, table_i64 = 0;

  // Word offsets of the sections; `end` is the packed tensor's length.
  struct Sections {
    int64_t row_offsets, kv_indices, kv_full, code, table_i32, table_i64, end;
  };
  Sections sections() const;
  int64_t num_rows() const;  // num_heads * query blocks
};

// One tensor of `header` and the arrays (1-D, any dtype convertible to the
// section's, all on one device), on their device.
at::Tensor pack_mask(const PackedHeader& header, const at::Tensor& row_offsets, const at::Tensor& kv_indices,
                     const at::Tensor& kv_full, const PatternTensors& pattern);

// A host mask and its pattern's encoding, packed on the CPU.
at::Tensor pack_mask(const BlockMask& mask, const PatternTensors& pattern);

// The BlockMask of a packed tensor on the CPU (checked: header, sizes, and
// the arrays as BlockMask's constructor checks them).
BlockMask unpack_mask(const at::Tensor& packed);

}  // namespace spattn::torch_bridge
