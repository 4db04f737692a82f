// cuda/bwd_sm80/bwd_traits.cuh - tile shapes and shared-memory layouts of the
// backward kernels (sm80 and newer, mma.sync), one choice for every head dim.
//
// Both gradient kernels take 64 x 64 tiles (64 query rows by 64 keys, the
// plan's granularity, kBwdTileSide) and 4 warps. Each warp owns 16 rows of
// the side the CTA keeps (keys in the dK/dV kernel, query rows in the dQ
// kernel) and all 64 columns of the side it walks, so every product of a
// tile step stays in the warp's registers in the mma C layout:
//   dK/dV kernel, per query tile: S^T, dP^T (16 keys x 64 queries, 32 fp32
//     each; at D = 128 in two parts of 32 queries, kDkvParts),
//     accumulating dV and dK (16 keys x D, D / 2 fp32 each);
//   dQ kernel, per key tile: S, dP (16 rows x 64 keys), accumulating dQ
//     (16 rows x D).
// dK and dV alone take 128 registers at D = 128, so a warp's rows stay at
// 16 (32 would not fit).
//
// Shared memory (rows of kSmemStride elements, 16-byte chunks XOR-swizzled
// by row % 8 so that ldmatrix reads of 8 rows hit 8 different bank groups):
//   dK/dV kernel: K, V (the CTA's keys), then kStages stages of Q and of
//     d_out, then kStages stages of the row statistics (64 LSE and 64 delta
//     floats): 97 KiB at D = 128, 49 KiB at D = 64;
//   dQ kernel: Q, d_out (the CTA's rows), then kStages stages of K and of V:
//     96 KiB at D = 128, 48 KiB at D = 64.
// Two CTAs of either kernel fit an sm90 multiprocessor (227 KiB) at D = 128
// (an sm80 one, 163 KiB, holds one there, two at D = 64).
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"

namespace spattn::cuda_detail {

template <typename T_, int kHeadDim_>
struct BwdTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kTile = 64;                 // query rows and keys of a tile
  static constexpr int kWarpRows = kTile / kWarps;  // rows of the kept side per warp (one 16-row MMA tile)
  static constexpr int kColAtoms = kTile / 8;      // 8-column MMA atoms across the walked side
  static constexpr int kDAtoms = kHeadDim / 8;     // 8-column MMA atoms across the head dim
  static constexpr int kRowChunks = kHeadDim / 8;  // 16-byte chunks of a row
  static constexpr int kSmemStride = (kHeadDim + 63) / 64 * 64;
  static constexpr int kStages = 2;  // buffers of the walked side's tiles
  // The dK/dV kernel takes a query tile in parts of 64 / kDkvParts queries
  // (S^T, P^T, dP^T, dS^T of a part, then the next): at D = 128 two, so that
  // S^T and dP^T take 32 registers beside dK and dV's 128 (whole, they
  // spilled), at the cost of reading K's and V's fragments twice.
  static constexpr int kDkvParts = kHeadDim > 64 ? 2 : 1;
  static constexpr int kDkvPartAtoms = kColAtoms / kDkvParts;
  static constexpr int kMinBlocksPerSm = 2;

  static constexpr int kTileBytes = kTile * kSmemStride * static_cast<int>(sizeof(T));
  static constexpr int kStatFloats = 2 * kTile;  // a stage's LSE (log2) and delta
  // dK/dV kernel: K, V | Q stages | d_out stages | statistics stages.
  static constexpr int kDkvQOffset = 2 * kTileBytes;
  static constexpr int kDkvDOutOffset = kDkvQOffset + kStages * kTileBytes;
  static constexpr int kDkvStatOffset = kDkvDOutOffset + kStages * kTileBytes;
  static constexpr int kDkvSmemBytes = kDkvStatOffset + kStages * kStatFloats * 4;
  // dQ kernel: Q, d_out | K stages | V stages.
  static constexpr int kDqKOffset = 2 * kTileBytes;
  static constexpr int kDqVOffset = kDqKOffset + kStages * kTileBytes;
  static constexpr int kDqSmemBytes = kDqVOffset + kStages * kTileBytes;

  static_assert(kTile == kBwdTileSide, "the plan's tile is the kernels' tile");
  static_assert(kWarpRows == 16, "one 16-row MMA tile per warp");
  static_assert(kHeadDim % 16 == 0, "head dim a multiple of 16");
  static_assert((kSmemStride / 8 & (kSmemStride / 8 - 1)) == 0, "chunks per row are a power of two");
  static_assert(kThreads % (kSmemStride / 8) == 0 && kTile % (kThreads / (kSmemStride / 8)) == 0 &&
                    (kThreads / (kSmemStride / 8)) % 8 == 0,
                "tile loads split evenly over the threads, a thread's chunk swizzled alike on every pass");
  static_assert(kDkvSmemBytes <= 227 * 1024 && kDqSmemBytes <= 227 * 1024, "fits a multiprocessor");
};

}  // namespace spattn::cuda_detail
