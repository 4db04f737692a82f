// simd_avx2.cpp - the query-tile kernel, FMA loop and backward tile products
// (cpu/backward/tile_grad_kernel.hpp) for AVX2 with FMA3.
//
// Compiled with AVX2/FMA flags (src/CMakeLists.txt sets them on this file
// only) and called only after the run-time check in isa.cpp. Everything but
// the exported accessors has internal linkage, and only intrinsics headers
// are included, so no AVX2 code can be picked by the linker for generic callers.
//
// Tile: 16 query rows (2 vectors of 8 lanes); scores in register tiles of 6
// keys x 2 vectors (12 accumulators, 2 operands and a broadcast fill the 16
// registers), values in panels of 4 head dims x 2 vectors. Keys in chunks of 64.
#include <immintrin.h>

#include <cstdint>

#include "cpu/fast/isa.hpp"
#include "cpu/backward/tile_grad_kernel.hpp"
#include "cpu/fast/tile_kernel.hpp"

namespace spattn::cpu_fast {
namespace {

#define SPATTN_SIMD_INLINE static inline __attribute__((always_inline))

struct Avx2 {
  using Reg = __m256;
  static constexpr int kWidth = 8;

  SPATTN_SIMD_INLINE Reg zero() { return _mm256_setzero_ps(); }
  SPATTN_SIMD_INLINE Reg set1(float x) { return _mm256_set1_ps(x); }
  SPATTN_SIMD_INLINE Reg load(const float* p) { return _mm256_loadu_ps(p); }
  SPATTN_SIMD_INLINE void store(float* p, Reg x) { _mm256_storeu_ps(p, x); }
  SPATTN_SIMD_INLINE Reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  SPATTN_SIMD_INLINE Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  SPATTN_SIMD_INLINE Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  SPATTN_SIMD_INLINE Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  SPATTN_SIMD_INLINE Reg sub(Reg a, Reg b) { return _mm256_sub_ps(a, b); }
  SPATTN_SIMD_INLINE Reg max(Reg a, Reg b) { return _mm256_max_ps(a, b); }

  // 2^x: x = n + f with n = round(x), |f| <= 1/2; 2^f = 1 + f * q(f) with the
  // same minimax polynomial as the AVX-512 kernel, times 2^n built in the
  // exponent field. x is clamped to [-127, 127]; x <= -127 (and -inf) gives 0;
  // NaN stays NaN (vmaxps and vminps return their second operand when either
  // is NaN, so x goes second).
  SPATTN_SIMD_INLINE Reg exp2(Reg x) {
    x = _mm256_min_ps(_mm256_set1_ps(127.0f), _mm256_max_ps(_mm256_set1_ps(-127.0f), x));
    const Reg n = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const Reg f = _mm256_sub_ps(x, n);
    Reg p = _mm256_set1_ps(1.3264727313e-03f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6715129912e-03f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5507335812e-02f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022242427e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314700365e-01f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23)));
  }
  SPATTN_SIMD_INLINE Reg keep(Reg s, uint32_t lanes) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256i set = _mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32(static_cast<int32_t>(lanes)), lane_bit), lane_bit);
    return _mm256_blendv_ps(_mm256_set1_ps(-__builtin_inff()), s, _mm256_castsi256_ps(set));
  }
  SPATTN_SIMD_INLINE Reg finite_or_zero(Reg m) {
    const Reg empty = _mm256_cmp_ps(m, _mm256_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm256_blendv_ps(m, _mm256_setzero_ps(), empty);
  }
};

using Kernel = TileGroupKernel<Avx2, 2, 6, 4, 64>;

// Runs the kernel with denormal inputs and results flushed to zero (MXCSR FTZ
// and DAZ), restoring the caller's MXCSR after. exp2 of masked (-inf) scores
// and products of tiny probabilities otherwise take microcode assists of
// about a hundred cycles each: they cost a third of the time of a sliding
// window before this (dev/notes/cpu-08-flush-denormals-to-zero-in-the-kernels.md).
// Nothing below 2^-126 matters to a softmax.
void run_flushing_denormals(const TileGroupArgs& args) {
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);
  Kernel::run(args);
  _mm_setcsr(saved);
}

// In-register transpose of 8 rows of 8 floats: x[k] becomes column k.
SPATTN_SIMD_INLINE void transpose8(__m256* x) {
  __m256 t[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(x[i], x[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(x[i], x[i + 1]);
  }
  __m256 u[8];
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xee);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x20);
    x[i + 4] = _mm256_permute2f128_ps(u[i], u[i + 4], 0x31);
  }
}

// 8 x 8 blocks through transpose8, the ragged edges element by element.
void transpose(const float* src, int64_t src_stride, int64_t rows, int64_t cols, const float* col_scale,
               float* dst, int64_t dst_stride) {
  const int64_t full_rows = rows / 8 * 8, full_cols = cols / 8 * 8;
  for (int64_t r0 = 0; r0 < full_rows; r0 += 8) {
    for (int64_t c0 = 0; c0 < full_cols; c0 += 8) {
      const __m256 scale = _mm256_loadu_ps(col_scale + c0);
      __m256 x[8];
      for (int i = 0; i < 8; ++i)
        x[i] = _mm256_mul_ps(_mm256_loadu_ps(src + (r0 + i) * src_stride + c0), scale);
      transpose8(x);
      for (int k = 0; k < 8; ++k) _mm256_storeu_ps(dst + (c0 + k) * dst_stride + r0, x[k]);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c)
      dst[c * dst_stride + r] = src[r * src_stride + c] * col_scale[c];
}

constexpr cpu_backward::TileGradOps kGradOps = cpu_backward::TileGradKernel<Avx2, 4, 2, 4, 2>::ops("avx2");

#undef SPATTN_SIMD_INLINE

const TileKernel kAvx2Kernel{"avx2",          Kernel::M,     Kernel::kChunk,
                             Kernel::kValuePanel, &run_flushing_denormals, &transpose,
                             &FmaLoop<Avx2, 12>::run, &transpose};

}  // namespace

const TileKernel* avx2_tile_kernel() { return &kAvx2Kernel; }

}  // namespace spattn::cpu_fast

namespace spattn::cpu_backward {

const TileGradOps* avx2_tile_grad() { return &cpu_fast::kGradOps; }

}  // namespace spattn::cpu_backward
