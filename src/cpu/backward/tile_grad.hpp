// tile_grad.hpp - the arithmetic of the fast CPU backward pass on one tile of
// (query rows x keys), in fp32 (cpu_backward.cpp drives it): register-blocked
// SIMD kernels per instruction set for finite tiles, plain loops otherwise.
//
// Layouts: queries and d_out rows are (rows x D) with leading dimension D,
// kTileRows rows of storage; keys and values are staged transposed (D x
// kTileKeys) for the scores, and keys also (keys x D, kTileKeys rows of
// storage) for dq; accumulators have max(kTileRows, kTileKeys) rows.
#pragma once

#include <cstdint>

namespace spattn::cpu_backward {

constexpr int64_t kTileRows = 64;  // query rows of a tile
constexpr int64_t kTileKeys = 64;  // keys of a tile

// One implementation of the three tile products:
//   probabilities: P (rows x keys, leading dimension kTileKeys) =
//     exp(scale * Q K^T - lse_i), and dS = P * (dO V^T - delta_i) in `ds`;
//     where `allowed` (per row, bit c: key c is allowed; null for a full
//     tile) has a 0 bit, and
//     on rows whose lse is -inf, both are 0;
//   accumulate_rows: acc (rows x D) += A (rows x keys) B (keys x D): dq += dS K;
//   accumulate_keys: acc (keys x D) += A^T (keys x rows) B (rows x D):
//     dv += P^T dO, dk += dS^T Q.
struct TileGradOps {
  const char* name;
  int64_t head_dim_multiple;  // head dims it takes: multiples of this
  void (*probabilities)(const float* q, const float* d_out, const float* k_t, const float* v_t, const float* lse,
                        const float* delta, const uint64_t* allowed, int64_t rows, int64_t keys,
                        int64_t head_dim, float scale, float* p, float* ds);
  void (*accumulate_rows)(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                          float* acc);
  void (*accumulate_keys)(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                          float* acc);
};

// Plain loops: any head dim; zero weights are skipped, so a tile holding a
// non-finite value gives what the semantics say (masked pairs never read).
const TileGradOps& plain_tile_grad();

// The register-blocked kernels of the instruction set the fast CPU backend
// runs (cpu/fast/isa.hpp; tile_grad_kernel.hpp) where they take `head_dim`,
// else the plain loops. They multiply every pair of a tile: only for finite tiles.
const TileGradOps& fast_tile_grad(int64_t head_dim);

// Per-instruction-set kernels (cpu/fast/simd_avx2.cpp, simd_avx512.cpp; x86-64 builds only).
const TileGradOps* avx2_tile_grad();
const TileGradOps* avx512_tile_grad();

}  // namespace spattn::cpu_backward
