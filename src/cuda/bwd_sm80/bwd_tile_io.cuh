// cuda/bwd_sm80/bwd_tile_io.cuh - moving tiles between global and shared
// memory for the backward kernels: asynchronous copies of 64-row tiles into
// the swizzled layout, the row statistics of a query tile, and the stores
// of a warp's gradient rows.
//
// A tile row is kSmemStride elements; its 16-byte chunk c is stored at chunk
// c ^ (row % 8) (the forward kernel's layout, fwd_sm80/fwd_kernel.cuh), so
// that the 8 row addresses of an ldmatrix phase fall in 8 different bank
// groups, for the plain and the transposing loads alike.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/common/ptx_sm80.cuh"

namespace spattn::cuda_detail {

// Byte address of 16-byte chunk `chunk` of row `row` of a swizzled tile at `base`.
template <typename Tr>
__device__ __forceinline__ uint32_t bwd_tile_address(uint32_t base, int row, int chunk) {
  return base + static_cast<uint32_t>((row * Tr::kSmemStride + ((chunk ^ (row & 7)) << 3)) *
                                      static_cast<int>(sizeof(typename Tr::T)));
}

// The fragment loops step a lane's chunk by 2 (16 columns) and its row by 16.
// A row's chunks fill the low bits of its byte offset (a power of two of
// them), so with c0 < 2,
//   offset(row + 16 r, 2 j + c0) = (offset(row, c0) ^ (32 j)) + 16 r * kRowBytes:
// one XOR per 16-column step and an immediate per 16-row step.
template <typename Tr>
struct BwdFragStep {
  static constexpr uint32_t kRowBytes = Tr::kSmemStride * sizeof(typename Tr::T);
  static constexpr uint32_t kRows16 = 16 * kRowBytes;
  __device__ __forceinline__ static uint32_t chunks(int j) { return static_cast<uint32_t>(j) * 32u; }
};

// Starts copying rows [row0, row0 + kTile) of an (L, D) slice (`rows` points
// at its row 0) into the swizzled tile at `smem`; rows at or past `len` are
// zero-filled (never read). Threads lie over the padded row, each keeping
// one chunk column and stepping down the rows.
template <typename Tr>
__device__ __forceinline__ void load_tile_rows(uint32_t smem, const typename Tr::T* rows, int64_t row_stride,
                                               int64_t row0, int64_t len) {
  constexpr int kChunksPerRow = Tr::kSmemStride / 8;
  constexpr int kRowsPerPass = Tr::kThreads / kChunksPerRow;
  const int chunk = static_cast<int>(threadIdx.x) % kChunksPerRow;
  const int row = static_cast<int>(threadIdx.x) / kChunksPerRow;
  if (chunk >= Tr::kRowChunks) return;  // padding columns (head dims that are not a multiple of 64)
  const uint32_t to = bwd_tile_address<Tr>(smem, row, chunk);
#pragma unroll
  for (int n = 0; n < Tr::kTile / kRowsPerPass; ++n) {
    const int64_t r = row0 + row + n * kRowsPerPass;
    const bool valid = r < len;
    // An element offset made a pointer only for rows that exist.
    const typename Tr::T* from = valid ? rows + r * row_stride + chunk * 8 : rows;
    cp_async_16(to + n * kRowsPerPass * BwdFragStep<Tr>::kRowBytes, from, valid);
  }
}

// Starts copying a query tile's 64 LSE (log2) and 64 delta entries (from
// entry `first` of the row scratch, whole and 16-byte aligned by its
// padding) to `stats` (LSE, then delta): the first warp, a 16-byte chunk
// per lane.
template <typename Tr>
__device__ __forceinline__ void load_tile_stats(uint32_t stats, const BwdRowStats& rs, int64_t first) {
  constexpr int kChunks = Tr::kTile / 4;  // of one array
  const int lane = static_cast<int>(threadIdx.x);
  if (lane >= 2 * kChunks) return;
  const int part = lane / kChunks, chunk = lane % kChunks;
  const float* from = (part == 0 ? rs.lse_log2 : rs.delta) + first + 4 * chunk;
  cp_async_16(stats + static_cast<uint32_t>((part * Tr::kTile + 4 * chunk) * 4), from, true);
}

// Writes a warp's 16 rows of a gradient tile, held in the mma C layout
// (acc[d][2 * half + c]: row 16 * warp + lane / 4 + 8 * half, column
// 8 d + 2 (lane % 4) + c), times `factor`, to rows [row0, ...) of (b, head)
// of g (rows at or past `len` are not written), as pairs of elements: 4-byte
// stores of the input type or 8-byte stores of fp32.
template <typename Tr>
__device__ __forceinline__ void store_gradient_rows(const TensorArg& g, bool f32, int64_t b, int64_t head,
                                                    int64_t row0, int64_t len,
                                                    const float (&acc)[Tr::kDAtoms][4], float factor, int warp,
                                                    int lane) {
  using T = typename Tr::T;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + warp * Tr::kWarpRows + lane / 4 + 8 * half;
    if (row >= len) continue;
    const int64_t base = g.row_offset(b, head, row) + 2 * (lane % 4);
#pragma unroll
    for (int d = 0; d < Tr::kDAtoms; ++d) {
      const float x = acc[d][2 * half] * factor, y = acc[d][2 * half + 1] * factor;
      if (f32)
        *reinterpret_cast<float2*>(static_cast<float*>(g.data) + base + 8 * d) = make_float2(x, y);
      else
        *reinterpret_cast<uint32_t*>(static_cast<T*>(g.data) + base + 8 * d) = pack2<T>(x, y);
    }
  }
}

}  // namespace spattn::cuda_detail
