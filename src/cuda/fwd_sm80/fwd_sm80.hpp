// cuda/fwd_sm80/fwd_sm80.hpp - entry of the portable fused forward kernel.
//
// The kernel tile every plan for it is derived with, the head dims it is built
// for, and the launch, dispatched at run time on dtype and head dim to one of
// the explicit instantiations in cuda/instantiations/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

constexpr TileShape kSm80Tile{128, 64};

// Throws spattn::Error naming head_dim unless it is built.
void check_fwd_sm80_head_dim(int64_t head_dim);

// Launches the kernel for `dtype` (fp16 or bf16) and p.head_dim on `stream`,
// then the merge of split rows. p.partial_o / p.partial_lse must hold
// partial_o_floats / partial_lse_floats(p, kSm80Tile.rows) floats
// (split_combine.hpp) when the plan splits rows.
void run_fwd_sm80(const FwdParams& p, DType dtype, cudaStream_t stream);

// One instantiation per (element type, head dim), defined in cuda/instantiations/.
template <typename T, int kHeadDim>
void launch_fwd_sm80(const FwdParams& p, cudaStream_t stream);

}  // namespace spattn::cuda_detail
