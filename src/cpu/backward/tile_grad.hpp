// tile_grad.hpp - the arithmetic of the fast CPU backward pass on one tile of
// (query rows x keys), in fp32 (cpu_backward.cpp drives it).
//
// Layouts: queries and d_out rows are (rows x D) with leading dimension D;
// keys and values are staged transposed (D x keys, leading dimension
// kTileKeys) for the scores, and keys also (keys x D) for dq. Every inner
// loop runs along a contiguous axis, so the compiler vectorises it; on x86
// each function is compiled for AVX-512, AVX2 and baseline and chosen at load
// time.
#pragma once

#include <cstdint>

namespace spattn::cpu_backward {

constexpr int64_t kTileRows = 64;  // query rows of a tile
constexpr int64_t kTileKeys = 64;  // keys of a tile

// P (rows x keys, leading dimension kTileKeys) = exp(scale * Q K^T - lse_i),
// and dS = P * (dO V^T - delta_i) in `ds`; where `allowed` (rows x keys bytes,
// or null for a full tile) is 0, and on rows whose lse is -inf, both are 0.
void tile_probabilities(const float* q, const float* d_out, const float* k_t, const float* v_t,
                        const float* lse, const float* delta, const uint8_t* allowed, int64_t rows,
                        int64_t keys, int64_t head_dim, float scale, float* p, float* ds);

// acc (rows x D) += A (rows x keys) B (keys x D): dq += dS K.
void accumulate_rows(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                     float* acc);

// acc (keys x D) += A^T (keys x rows) B (rows x D): dv += P^T dO, dk += dS^T Q.
void accumulate_keys(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                     float* acc);

}  // namespace spattn::cpu_backward
