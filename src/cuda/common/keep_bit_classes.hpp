// cuda/common/keep_bit_classes.hpp - how many classes of query heads a call's
// table of keep bits (keep_bits_table.cuh) tells apart within one plan row,
// the query heads that share a mask head. Host code.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

// KeepBitsArg::classes for call `p` (its exclusion, varlen batch and packed
// heads set) on `mask`: 0 where the call makes no table (varlen batches and
// packed query heads, whose bits differ per sequence or row); 1 where a
// plan row's heads share their bits (one head per mask head, or nothing
// reading the head); else the least common multiple of the rates through
// which the pattern's dilated terms and the split's exclusion read the head
// (dividing the heads per mask head: head h is of class h % classes), or
// the heads per mask head where something reads the head itself (per-head
// custom tables or exclusion runs, expressions changing within a mask head)
// or the rates do not divide them.
int32_t keep_bit_classes(const FwdParams& p, const BlockMask& mask);

}  // namespace spattn::cuda_detail
