// simd_avx512.cpp - the query-tile kernel, FMA loop and backward tile products
// (cpu/backward/tile_grad_kernel.hpp) for AVX-512 (F, BW, VL, DQ).
//
// Compiled with AVX-512 flags (src/CMakeLists.txt sets them on this file only)
// and called only after the run-time check in isa.cpp. Everything but the
// exported accessors has internal linkage, and only intrinsics headers are
// included, so no AVX-512 code can be picked by the linker for generic callers.
//
// Tile: 64 query rows (4 vectors of 16 lanes); register tiles of 6 keys (or a
// panel of 6 head dims) x 4 vectors: 24 accumulators of the 32 registers.
// Keys in chunks of 64. Chosen by measurement (docs/design_cpu.md,
// dev/notes/cpu-07-remainder-tiles-6-4-2-1-instead.md).
#include <immintrin.h>

#include <cstdint>

#include "cpu/fast/isa.hpp"
#include "cpu/backward/tile_grad_kernel.hpp"
#include "cpu/fast/tile_kernel.hpp"

namespace spattn::cpu_fast {
namespace {

#define SPATTN_SIMD_INLINE static inline __attribute__((always_inline))

struct Avx512 {
  using Reg = __m512;
  static constexpr int kWidth = 16;

  SPATTN_SIMD_INLINE Reg zero() { return _mm512_setzero_ps(); }
  SPATTN_SIMD_INLINE Reg set1(float x) { return _mm512_set1_ps(x); }
  SPATTN_SIMD_INLINE Reg load(const float* p) { return _mm512_loadu_ps(p); }
  SPATTN_SIMD_INLINE void store(float* p, Reg x) { _mm512_storeu_ps(p, x); }
  SPATTN_SIMD_INLINE Reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  SPATTN_SIMD_INLINE Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  SPATTN_SIMD_INLINE Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  SPATTN_SIMD_INLINE Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  SPATTN_SIMD_INLINE Reg sub(Reg a, Reg b) { return _mm512_sub_ps(a, b); }
  SPATTN_SIMD_INLINE Reg max(Reg a, Reg b) { return _mm512_max_ps(a, b); }

  // 2^x: x = n + f with n = round(x), |f| <= 1/2; 2^f = 1 + f * q(f) with q
  // of degree 4 fitted for minimax relative error (below 2e-7 evaluated in
  // fp32, and exactly 1 at f = 0), then scaled by 2^n with vscalefps. Inputs
  // below -200 (and -inf) give 0; NaN stays NaN (vmaxps returns its second
  // operand when either is NaN, so x goes second).
  SPATTN_SIMD_INLINE Reg exp2(Reg x) {
    x = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
    const Reg n = _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const Reg f = _mm512_sub_ps(x, n);
    Reg p = _mm512_set1_ps(1.3264727313e-03f);
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6715129912e-03f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5507335812e-02f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022242427e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314700365e-01f));
    p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
  }
  SPATTN_SIMD_INLINE Reg keep(Reg s, uint32_t lanes) {
    return _mm512_mask_blend_ps(static_cast<__mmask16>(lanes), _mm512_set1_ps(-__builtin_inff()), s);
  }
  SPATTN_SIMD_INLINE Reg finite_or_zero(Reg m) {
    const __mmask16 empty = _mm512_cmp_ps_mask(m, _mm512_set1_ps(-__builtin_inff()), _CMP_EQ_OQ);
    return _mm512_mask_blend_ps(empty, m, _mm512_setzero_ps());
  }
};


using Kernel = TileGroupKernel<Avx512, 4, 6, 6, 64>;

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

// In-register transpose of 16 rows of 16 floats: x[k] becomes column k.
SPATTN_SIMD_INLINE void transpose16(__m512* x) {
  __m512 t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(x[i], x[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(x[i], x[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    x[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    x[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    x[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    x[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(x[i], x[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(x[i + 8], x[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    x[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
    x[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
  }
}

// 16 x 16 blocks through transpose16, the ragged edges element by element.
// kStream: non-temporal stores for the blocks when every block row starts on
// a 64-byte boundary (they skip the read-for-ownership of each output line,
// a third of the output's memory traffic), fenced before returning.
template <bool kStream>
void transpose_blocks(const float* src, int64_t src_stride, int64_t rows, int64_t cols,
                      const float* col_scale, float* dst, int64_t dst_stride) {
  const int64_t full_rows = rows / 16 * 16, full_cols = cols / 16 * 16;
  const bool stream = kStream && reinterpret_cast<uintptr_t>(dst) % 64 == 0 && dst_stride % 16 == 0;
  for (int64_t r0 = 0; r0 < full_rows; r0 += 16) {
    for (int64_t c0 = 0; c0 < full_cols; c0 += 16) {
      const __m512 scale = _mm512_loadu_ps(col_scale + c0);
      __m512 x[16];
      for (int i = 0; i < 16; ++i)
        x[i] = _mm512_mul_ps(_mm512_loadu_ps(src + (r0 + i) * src_stride + c0), scale);
      transpose16(x);
      if (stream)
        for (int k = 0; k < 16; ++k) _mm512_stream_ps(dst + (c0 + k) * dst_stride + r0, x[k]);
      else
        for (int k = 0; k < 16; ++k) _mm512_storeu_ps(dst + (c0 + k) * dst_stride + r0, x[k]);
    }
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < full_rows ? full_cols : 0; c < cols; ++c)
      dst[c * dst_stride + r] = src[r * src_stride + c] * col_scale[c];
  if (stream) _mm_sfence();
}

const TileKernel kAvx512Kernel{"avx512",
                               Kernel::M,
                               Kernel::kChunk,
                               Kernel::kValuePanel,
                               &run_flushing_denormals,
                               &transpose_blocks<false>,
                               &FmaLoop<Avx512, 24>::run,
                               &transpose_blocks<true>};

constexpr cpu_backward::TileGradOps kGradOps = cpu_backward::TileGradKernel<Avx512, 4, 4, 4, 4>::ops("avx512");

#undef SPATTN_SIMD_INLINE

}  // namespace

const TileKernel* avx512_tile_kernel() { return &kAvx512Kernel; }

}  // namespace spattn::cpu_fast

namespace spattn::cpu_backward {

const TileGradOps* avx512_tile_grad() { return &cpu_fast::kGradOps; }

}  // namespace spattn::cpu_backward
