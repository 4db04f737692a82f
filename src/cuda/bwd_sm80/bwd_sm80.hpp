// cuda/bwd_sm80/bwd_sm80.hpp - entry of the backward kernels (sm80 and newer).
//
// run_backward queues the whole backward pass of one call on a stream:
//   1. the delta kernel (bwd_delta.cu): per query row, the LSE in log2 units
//      and delta = d_out . out - d_lse, into the call's fp32 row scratch;
//   2. the dK/dV kernel (bwd_dkdv_kernel.cuh): a CTA per (batch, kv head,
//      key tile) walks, for each query head of its kv head, the query tiles
//      that keep its key tile (the plan's key-major lists, in order) and
//      writes the tile's dK and dV once;
//   3. the dQ kernel (bwd_dq_kernel.cuh): a CTA per (batch, query head,
//      query tile) walks its row's key tiles (the forward's lists) and
//      writes the tile's dQ once.
// No gradient is accumulated across CTAs (no atomics), so every sum is taken
// in one fixed order: the result is bitwise reproducible. The price is that
// S and dP are computed in both gradient kernels (7 tile products per kept
// tile pair instead of 5).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

// The tile both gradient kernels walk, and the granularity of the plan.
constexpr TileShape kBwdTile{kBwdTileSide, kBwdTileSide};

// Throws spattn::Error naming head_dim unless the backward kernels are built for it.
void check_bwd_sm80_head_dim(int64_t head_dim);

// The delta kernel, then the dK/dV and dQ kernels for `dtype` (fp16 or bf16)
// and p.shape.head_dim, on `stream`. p.stats must hold
// batch * q_heads * stats.row_stride floats in each of its arrays.
void run_backward(const BwdParams& p, const BwdPlanView& plan, DType dtype, cudaStream_t stream);

// The delta kernel alone (bwd_delta.cu).
void launch_bwd_delta(const BwdParams& p, DType dtype, cudaStream_t stream);

// The two gradient kernels of one (element type, head dim), defined in cuda/instantiations/.
template <typename T, int kHeadDim>
void launch_bwd_sm80(const BwdParams& p, const BwdPlanView& plan, cudaStream_t stream);

}  // namespace spattn::cuda_detail
