// cuda/fwd_sm90/fwd_sm90.hpp - entry of the Hopper-native fused forward
// kernel (sm_90a: TMA, wgmma, warp specialisation; fwd_sm90_kernel.cuh).
//
// The kernel tiles its plans are derived with, whether this build and the
// current device can run it, what it supports, and the launch, dispatched at
// run time on dtype and head dim to the explicit instantiations in
// cuda/instantiations/ (compiled only when the build targets sm90).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "cuda/common/device_buffer.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

// The kernel tile for a head dim: 128 queries x 128 keys up to D = 128;
// 128 x 64 at D = 256, where a 128-key tile's scores, P and O would not fit
// the consumers' registers next to each other, nor two K/V stages the shared
// memory. Both tiles take every power-of-two mask block from 16 to 256.
constexpr TileShape kSm90WideTile{128, 128};
constexpr TileShape kSm90NarrowTile{128, 64};
constexpr TileShape sm90_tile(int64_t head_dim) { return head_dim > 128 ? kSm90NarrowTile : kSm90WideTile; }

// At head dims 64 and 128 the kernel also runs the narrow tile, for masks
// whose blocks fill 64-key tiles far better than 128-key ones (64 x 64
// blocks scattered as BigBird's, blocks of 192 keys that fit no 128-key
// tile): the call takes it where its plan computes a small enough share of
// the pairs of the other tiles' plans, the wide one's included where the
// blocks fit it (call_tile in kernel_choice.hpp).
constexpr bool sm90_narrow_option_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

// At head dims up to 64, where a tile's exponentials take as long as its
// products, a second kernel of three consumer warpgroups runs 192 x 128
// tiles: each group's softmax then runs while the two others' products keep
// the tensor cores busy (as FlashAttention-3 does there). The call takes it
// where its plan costs at most 5% more work than the 128-row tile's and
// undercuts the other tiles (call_tile in kernel_choice.hpp); it takes every
// power-of-two mask block but 16 x 16.
constexpr TileShape kSm90TallTile{192, 128};
constexpr bool sm90_tall_head_dim(int64_t head_dim) { return head_dim <= 64; }

// At head dims 64 and 128 the kernel also runs 64 x 64 tiles, one consumer
// warpgroup per CTA and two CTAs per multiprocessor, for masks of scattered
// 64 x 64 blocks (BigBird's, random blocks): a 128-row tile holds two mask
// rows, whose kept blocks seldom meet, so a warpgroup often has no products
// for a tile while the other computes. The call takes it where its plan
// computes a small enough share of the other tiles' pairs (call_tile in
// kernel_choice.hpp).
constexpr TileShape kSm90SmallTile{64, 64};
constexpr bool sm90_small_head_dim(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

// CTAs of the kernel on `tile` that run on one multiprocessor at a time:
// two on the small tile, one on the others.
constexpr int sm90_ctas_per_sm(TileShape tile) { return tile == kSm90SmallTile ? 2 : 1; }

// True when this build holds sm_90a code and the current device has compute
// capability 9.0 (sm_90a code runs on no other).
bool fwd_sm90_available();

// Head dims the kernel is built for, as "64, 128" (empty when not built).
std::string fwd_sm90_head_dims();

// Whether the kernel handles `head_dim` in this build.
bool fwd_sm90_supports_head_dim(int64_t head_dim);

// Launches the kernel for `dtype` (fp16 or bf16), p.head_dim and the tile
// p.plan was made for on `stream` (a persistent grid of one CTA per
// multiprocessor, two on the small tile), then the merge of split rows.
// p.plan must be the plan of sm90_tile(p.head_dim), of kSm90TallTile where
// sm90_tall_head_dim, of kSm90SmallTile where sm90_small_head_dim, or of
// kSm90NarrowTile where sm90_narrow_option_head_dim (a dilated split's
// passes: of the split made for that tile); a varlen batch needs
// p.varlen.total_q and total_k > 0; p.partial_o / p.partial_lse must hold
// partial_o_floats / partial_lse_floats(p, p.plan.tile_rows) floats
// (split_combine.hpp) when the plan splits rows.
void run_fwd_sm90(const FwdParams& p, DType dtype, cudaStream_t stream);

// Makes the table of keep bits (keep_bits_table.cuh) of calls `p` of the
// plan whose tile p.plan was made for, as run_fwd_sm90 would launch them,
// and points p.keep_bits at it; returns its memory (empty: none).
DevicePtr make_fwd_sm90_keep_bits(FwdParams& p, DType dtype, cudaStream_t stream);

// One instantiation per (element type, head dim, tile: sm90_tile, and
// kSm90TallTile, kSm90SmallTile or kSm90NarrowTile where the head dim has
// that option; the tile's rows give the consumer warpgroups, 64 rows each),
// defined in cuda/instantiations/.
template <typename T, int kHeadDim, int kTileRows, int kTileCols>
void launch_fwd_sm90(const FwdParams& p, cudaStream_t stream);
template <typename T, int kHeadDim, int kTileRows, int kTileCols>
DevicePtr make_fwd_sm90_keep_bits(FwdParams& p, cudaStream_t stream);

}  // namespace spattn::cuda_detail
