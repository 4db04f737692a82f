// varlen_sequences.hpp - the sequences of a packed variable-length batch as
// the host backends walk them (forward and backward): each sequence's rows
// in the packed tensors, and the mask of its own lengths.
#pragma once

#include <cstdint>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::detail {

// Sequence b's rows: queries [q_first, q_first + q_len), keys [k_first, k_first + k_len).
struct VarlenSequence {
  int64_t q_first = 0, q_len = 0, k_first = 0, k_len = 0;
};

// Sequence b of a batch whose host cu_seqlens have been checked (check_cu_seqlens).
VarlenSequence varlen_sequence(const VarlenBatch& batch, int64_t b);

// The mask of `mask`'s pattern for sequence `s` alone (its lengths, the
// mask's blocks, `num_heads` heads; Longformer global tokens beyond its length
// do not exist in it).
BlockMask sequence_mask(const BlockMask& mask, const VarlenSequence& s, int64_t num_heads);

}  // namespace spattn::detail
