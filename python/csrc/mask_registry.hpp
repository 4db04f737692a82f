// python/csrc/mask_registry.hpp - the host BlockMask behind each packed mask
// tensor the operators receive (packed_mask.hpp), decoded once and kept, so
// that a mask's plans (spattn/plan.hpp, cached by the BlockMask) serve every
// later call: a repeated call with the same mask does no host work but the
// lookup and the launch.
//
// Masks are found by the identity and version counter of their tensor (held
// here, so its storage cannot be reused meanwhile): an in-place change makes
// a new entry. An absent mask is the dense mask of the call's lengths (one
// per pair of lengths). At most kMaxMasks are kept, least recently used
// dropped first. The first use of a tensor on a CUDA device copies it to the
// host (one synchronisation); `before_copy` runs first (the CUDA operators
// refuse that copy during a graph capture there).
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <memory>
#include <optional>

#include "spattn/block_mask.hpp"

namespace spattn::torch_bridge {

constexpr size_t kMaxMasks = 64;

// The mask of `packed`, or the dense mask of q_len x k_len (blocks of 128)
// where it is absent.
std::shared_ptr<const BlockMask> registered_mask(const std::optional<at::Tensor>& packed, int64_t q_len,
                                                 int64_t k_len, const std::function<void()>& before_copy = {});

}  // namespace spattn::torch_bridge
