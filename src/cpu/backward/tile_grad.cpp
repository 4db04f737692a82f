// tile_grad.cpp - the plain tile loops of the CPU backward pass and the choice
// of the kernels a call runs (tile_grad.hpp).
#include "cpu/backward/tile_grad.hpp"

#include "cpu/fast/isa.hpp"

#include <cmath>
#include <initializer_list>
#include <limits>


namespace spattn::cpu_backward {
namespace {

void plain_probabilities(const float* q, const float* d_out, const float* k_t, const float* v_t,
                        const float* lse, const float* delta, const uint64_t* allowed, int64_t rows,
                        int64_t keys, int64_t head_dim, float scale, float* p, float* ds) {
  for (int64_t i = 0; i < rows; ++i) {
    float* s = p + i * kTileKeys;
    float* dp = ds + i * kTileKeys;
    for (int64_t j = 0; j < keys; ++j) s[j] = dp[j] = 0.0f;
    if (lse[i] == -std::numeric_limits<float>::infinity()) continue;  // a row with no allowed key
    for (int64_t d = 0; d < head_dim; ++d) {
      const float qd = q[i * head_dim + d], od = d_out[i * head_dim + d];
      const float* kd = k_t + d * kTileKeys;
      const float* vd = v_t + d * kTileKeys;
      for (int64_t j = 0; j < keys; ++j) {
        s[j] += qd * kd[j];
        dp[j] += od * vd[j];
      }
    }
    const float row_lse = lse[i], row_delta = delta[i];
    const uint64_t keep = allowed ? allowed[i] : ~uint64_t{0};
    for (int64_t j = 0; j < keys; ++j) {
      const float weight = std::exp(scale * s[j] - row_lse);
      const bool kept = (keep >> j) & 1u;
      s[j] = kept ? weight : 0.0f;
      dp[j] = kept ? weight * (dp[j] - row_delta) : 0.0f;
    }
  }
}

void plain_accumulate_rows(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                     float* acc) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < keys; ++j) {
      const float x = a[i * kTileKeys + j];
      if (x == 0.0f) continue;
      const float* bj = b + j * head_dim;
      float* out = acc + i * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) out[d] += x * bj[d];
    }
}

void plain_accumulate_keys(const float* a, const float* b, int64_t rows, int64_t keys, int64_t head_dim,
                     float* acc) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* bi = b + i * head_dim;
    for (int64_t j = 0; j < keys; ++j) {
      const float x = a[i * kTileKeys + j];
      if (x == 0.0f) continue;
      float* out = acc + j * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) out[d] += x * bi[d];
    }
  }
}

const TileGradOps kPlain{"plain", 1, &plain_probabilities, &plain_accumulate_rows, &plain_accumulate_keys};

}  // namespace

const TileGradOps& plain_tile_grad() { return kPlain; }

const TileGradOps& fast_tile_grad(int64_t head_dim) {
#if defined(SPATTN_CPU_X86)
  // The widest kernels that take the head dim (AVX-512 machines run the AVX2 ones too).
  const cpu_fast::CpuIsa isa = cpu_fast::active_cpu_isa();
  for (const TileGradOps* ops : {isa == cpu_fast::CpuIsa::Avx512 ? avx512_tile_grad() : nullptr,
                                 isa != cpu_fast::CpuIsa::Portable ? avx2_tile_grad() : nullptr})
    if (ops != nullptr && head_dim % ops->head_dim_multiple == 0) return *ops;
#else
  (void)head_dim;
#endif
  return kPlain;
}

}  // namespace spattn::cpu_backward
