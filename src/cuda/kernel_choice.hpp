// cuda/kernel_choice.hpp - which fused kernel runs a call, and its tile: the
// one decision shared by attention (cuda_backend.cpp) and dynamic attention
// (select/dynamic_attention.cu).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "cuda/plan/tile_plan.hpp"

namespace spattn::cuda_detail {

// Whether the Hopper (sm90) kernel runs a call with head dim `head_dim`:
// the kernel choice (SPATTN_CUDA_KERNEL or cuda_set_kernel) allows it, the
// device has compute capability 9.0, the build has the kernel for this head
// dim, and `tile_fits` (the call's mask blocks suit the sm90 tile). Where the
// choice forces sm90 and one of these fails it throws spattn::Error naming
// `caller` and the reason; for the tile, `explain_misfit` throws it.
bool choose_sm90(const std::string& caller, int64_t head_dim, bool tile_fits,
                 const std::function<void()>& explain_misfit);

// The tile of the kernel that runs a call: the sm90 kernel's for the head
// dim, or the sm80 kernel's for the head dim and whether the call's blocks
// fit its wide tile (`sm80_wide_fits`).
TileShape kernel_tile(bool sm90, int64_t head_dim, bool sm80_wide_fits);

}  // namespace spattn::cuda_detail
