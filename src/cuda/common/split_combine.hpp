// cuda/common/split_combine.hpp - the partial results of split rows (see
// tile_plan.hpp) and the step that merges them, shared by the fused forward
// kernels: each piece of a split row writes, per row of its query tile, the
// normalised O (head_dim floats) and the natural-log LSE to a slot; the
// combine kernel merges a row's slots into the output after the kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"

namespace spattn::cuda_detail {

// Floats of partial results the plan's split rows need for query tiles of
// `tile_rows` rows: O, then the LSE.
inline int64_t partial_o_floats(const FwdParams& p, int64_t tile_rows) {
  return p.plan.num_slots * p.batch * (p.q_heads / p.plan.blocks.num_heads) * tile_rows * p.head_dim;
}
inline int64_t partial_lse_floats(const FwdParams& p, int64_t tile_rows) {
  return p.plan.num_slots * p.batch * (p.q_heads / p.plan.blocks.num_heads) * tile_rows;
}

// Merges the pieces of split rows into the output (after the kernel, same
// stream; on compute capability 9.0 and newer as the kernel's programmatic
// dependent, dependent_launch.cuh); slot s of copy c holds tile rows from
// (s * copies + c) * tile_rows.
template <typename T>
void launch_split_combine(const FwdParams& p, int64_t tile_rows, cudaStream_t stream);

}  // namespace spattn::cuda_detail
