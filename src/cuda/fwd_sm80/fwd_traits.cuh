// cuda/fwd_sm80/fwd_traits.cuh - tile shapes and shared-memory layout of the
// portable forward kernel, one documented choice per head dimension.
//
// A CTA computes a 128-row query tile against key tiles of kBlockN keys (128
// up to head dim 64 where the mask's blocks allow, else 64; sm80_tile in
// fwd_sm80.hpp). Head dims up to 128: 4 warps, each owning 32 query rows (two
// 16-row MMA tiles, so every K/V fragment read from shared memory feeds two
// MMAs); the 32 x D output accumulator then fits in registers (128 fp32 at
// D = 128) and two CTAs share an SM. Head dim 256: 8 warps of 16 rows, one
// CTA per SM.
//
// Shared memory: Q (128 x D), K and V (kBlockN x D each), rows padded to a multiple
// of 64 elements, 16-byte chunks XOR-swizzled by (row % 8) so that ldmatrix
// reads of 8 rows hit 8 different bank groups; then the query head's pattern
// expression (read by the predicate on partial tiles).
#pragma once

#include <cstdint>

#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

template <typename T_, int kHeadDim_, int kBlockN_>
struct FwdTraits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kWarps = kHeadDim > 128 ? 8 : 4;
  static constexpr int kMAtoms = kHeadDim > 128 ? 1 : 2;  // 16-row MMA tiles per warp
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kWarpRows = kMAtoms * 16;
  static constexpr int kBlockM = kWarps * kWarpRows;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per tile
  static constexpr int kNAtoms = kBlockN / 8;         // 8-key MMA columns of S
  static constexpr int kDAtoms = kHeadDim / 8;        // 8-wide MMA columns of O
  static constexpr int kRowChunks = kHeadDim / 8;     // 16-byte chunks per row
  static constexpr int kSmemStride = (kHeadDim + 63) / 64 * 64;
  static constexpr int kMinBlocksPerSm = sm80_ctas_per_sm(kHeadDim);
  static constexpr int kExp2PolyEvery = 0;  // every exponential on ex2.approx (online_softmax.cuh)

  static constexpr int kQElems = kBlockM * kSmemStride;
  static constexpr int kKVElems = kBlockN * kSmemStride;
  static constexpr int kExprOffset = (kQElems + 2 * kKVElems) * static_cast<int>(sizeof(T));
  static constexpr int kSmemBytes = kExprOffset + static_cast<int>(sizeof(PatternExpr));

  static_assert(kHeadDim % 16 == 0, "head dim must be a multiple of 16");
  static_assert(kBlockM == 128, "the tile plan assumes 128-row query tiles");
  static_assert((kBlockN * kRowChunks) % kThreads == 0, "K/V tiles split evenly over threads");
  static_assert(kExprOffset % 16 == 0, "the expression is 16-byte aligned");
};

}  // namespace spattn::cuda_detail
