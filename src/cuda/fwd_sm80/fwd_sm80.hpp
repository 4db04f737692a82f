// cuda/fwd_sm80/fwd_sm80.hpp - entry of the portable fused forward kernel.
//
// The kernel tiles its plans are derived with, the head dims it is built for,
// and the launch, dispatched at run time on dtype and head dim to one of
// the explicit instantiations in cuda/instantiations/.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/device_buffer.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

// The kernel tiles: 128 queries x 128 keys up to D = 64, where the scores of
// 128 keys and O still fit a thread's registers and a tile's products are
// short, so fewer barriers per product pay; 128 x 64 above, at any head dim
// for masks whose blocks fit only that tile (block_k 192, say), and up to
// D = 64 for masks whose blocks fill it far better than the wide one
// (sm80_wide_tile in kernel_choice.hpp). Both take every power-of-two mask
// block from 16 to 256.
constexpr TileShape kSm80WideTile{128, 128};
constexpr TileShape kSm80NarrowTile{128, 64};
constexpr bool sm80_wide_head_dim(int64_t head_dim) { return head_dim <= 64; }
constexpr TileShape sm80_tile(int64_t head_dim, bool wide_tile) {
  return sm80_wide_head_dim(head_dim) && wide_tile ? kSm80WideTile : kSm80NarrowTile;
}

// CTAs of the kernel that run on one multiprocessor at a time: two up to
// D = 128 (the registers of two 128-thread CTAs), one at D = 256.
constexpr int sm80_ctas_per_sm(int64_t head_dim) { return head_dim > 128 ? 1 : 2; }

// Throws spattn::Error naming head_dim unless it is built.
void check_fwd_sm80_head_dim(int64_t head_dim);

// Launches the kernel for `dtype` (fp16 or bf16), p.head_dim and the plan's
// tile (p.plan.tile_cols) on `stream`, then the merge of split rows.
// p.partial_o / p.partial_lse must hold partial_o_floats /
// partial_lse_floats(p, 128) floats (split_combine.hpp) when the plan splits
// rows.
void run_fwd_sm80(const FwdParams& p, DType dtype, cudaStream_t stream);

// Makes the table of keep bits (keep_bits_table.cuh) of calls `p` as
// run_fwd_sm80 would launch them and points p.keep_bits at it; returns its
// memory (empty: none).
DevicePtr make_fwd_sm80_keep_bits(FwdParams& p, DType dtype, cudaStream_t stream);

// One instantiation per (element type, head dim), defined in cuda/instantiations/.
template <typename T, int kHeadDim, int kTileCols>
void launch_fwd_sm80(const FwdParams& p, cudaStream_t stream);
template <typename T, int kHeadDim, int kTileCols>
DevicePtr make_fwd_sm80_keep_bits(FwdParams& p, cudaStream_t stream);

}  // namespace spattn::cuda_detail
