// cuda/fwd_sm90/tensor_maps.hpp - the TMA tensor maps of the Hopper forward
// kernel, built on the host for each call (they are kernel arguments, so a
// captured graph keeps its own copy).
//
// A (B, H, L, D) tensor with arbitrary strides is described as a 5-d tiled
// tensor map with dimensions (D, R, L / R, H, B) for a residue rate R (1 but
// in the permuted pass of a dilated split, FwdParams::residue_rate: row
// r + n R of the tensor is (r, n)), boxes of 128 bytes of D by one residue by
// `box_rows` rows, the 128-byte swizzle, and zero fill outside the tensor.
// cuTensorMapEncodeTiled is reached through the runtime's driver entry
// point, so nothing links the driver library.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "spattn/dtype.hpp"

namespace spattn::cuda_detail {

// The Hopper kernel's Q, K and V maps, and out's where the output goes
// through the TMA (has_o; out_tensor_map_usable); passed as one
// __grid_constant__ argument.
struct Sm90TensorMaps {
  CUtensorMap q, k, v, o;
  bool has_o = false;
};

// Whether a TMA map can describe `t` (a tensor of 16-bit elements) for the
// stores of out: a 16-byte aligned start and row, head and batch strides of
// multiples of 16 bytes (those of axes of extent 1 are never stepped).
bool out_tensor_map_usable(const TensorArg& t, int64_t batch, int64_t heads, int64_t len);

// `len` rows of each residue (len x rate rows in all). Throws spattn::Error
// when the driver rejects the description.
CUtensorMap make_tile_tensor_map(const TensorArg& t, DType dtype, int64_t batch, int64_t heads, int64_t len,
                                 int64_t rate, int64_t head_dim, int box_rows);

}  // namespace spattn::cuda_detail
