// cuda/common/packed_rows.hpp - grouped query heads of a few query positions
// in the row order of PackedHeads (fwd_params.hpp): packed row r of kv head j is
// query position r / G of query head j G + r % G. One position needs no copy
// (a strided view of q, out and the LSE is that order); more are copied into
// a packed buffer before the kernel (q) and back after it (out, the LSE).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"

namespace spattn::cuda_detail {

// Which way launch_packed_rows copies.
enum class PackDirection { ToPacked, FromPacked };

// The rows launch_packed_rows copies: `cols` elements of `elem_bytes` bytes
// per (batch, query head, position).
struct PackedRowsShape {
  int64_t batch = 0, q_heads = 0, group = 1, positions = 0, cols = 0, elem_bytes = 0;
};

// Copies the rows between `heads`, a strided (batch, q_heads, positions,
// cols) tensor, and `packed`, its (batch, q_heads / group, positions x
// group, cols) packing (strides of both in elements, unit stride along
// cols; an LSE is cols = 1). The rows' bytes, every stride's bytes and both
// bases must be multiples of 4 (checked).
void launch_packed_rows(const TensorArg& heads, const TensorArg& packed, const PackedRowsShape& shape,
                        PackDirection direction, cudaStream_t stream);

}  // namespace spattn::cuda_detail
