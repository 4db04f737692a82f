// pattern/build_checks.hpp - what every BlockMask builder (the host one in
// block_mask_build.cpp and the device one in cuda/plan/device_mask_build.cu)
// checks and decides before it classifies a single block, so both reject the
// same arguments with the same messages and make plans of the same shape.
#pragma once

#include <cstdint>

#include "spattn/block_mask.hpp"

namespace spattn {

// Throws spattn::Error naming the parameter unless `shape` is a valid plan
// shape for `pattern` (lengths >= 0, positive block sizes, heads a multiple of
// the pattern's, tables made for these lengths, key blocks within int32).
void check_build_args(const Pattern& pattern, const MaskShape& shape);

// Mask heads of the plan: one per query head when the pattern reads the head
// index, else one shared by all.
int64_t plan_mask_heads(const Pattern& pattern, const MaskShape& shape);

}  // namespace spattn
