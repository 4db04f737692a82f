// simd_portable.cpp - the query-tile kernel and FMA loop in portable C++.
//
// Uses GCC/Clang vector extensions (4 floats, 16 bytes) so any target with
// 128-bit SIMD (SSE2, NEON, ...) gets vector code without intrinsics, and any
// other target still compiles. Selected when the CPU has neither AVX-512 nor
// AVX2, or when forced (tests check it against the reference). Multiply and
// add stay separate operations here, so results differ from the FMA paths in
// the last bits.
//
// Tile: 8 query rows (2 vectors); register tiles of 4 keys (or head dims) x 2
// vectors; keys in chunks of 64.
#include <cstdint>
#include <cstring>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "cpu/fast/isa.hpp"
#include "cpu/fast/tile_kernel.hpp"

namespace spattn::cpu_fast {
namespace {

#define SPATTN_SIMD_INLINE static inline __attribute__((always_inline))

struct Portable {
  typedef float Reg __attribute__((vector_size(16)));
  typedef int32_t Int __attribute__((vector_size(16)));
  static constexpr int kWidth = 4;

  SPATTN_SIMD_INLINE Reg zero() { return Reg{0.0f, 0.0f, 0.0f, 0.0f}; }
  SPATTN_SIMD_INLINE Reg set1(float x) { return Reg{x, x, x, x}; }
  SPATTN_SIMD_INLINE Reg load(const float* p) {
    Reg r;
    std::memcpy(&r, p, sizeof(r));
    return r;
  }
  SPATTN_SIMD_INLINE void store(float* p, Reg x) { std::memcpy(p, &x, sizeof(x)); }
  SPATTN_SIMD_INLINE Reg bcast(const float* p) { return set1(*p); }
  SPATTN_SIMD_INLINE Reg fmadd(Reg a, Reg b, Reg c) { return a * b + c; }
  SPATTN_SIMD_INLINE Reg mul(Reg a, Reg b) { return a * b; }
  SPATTN_SIMD_INLINE Reg add(Reg a, Reg b) { return a + b; }
  SPATTN_SIMD_INLINE Reg sub(Reg a, Reg b) { return a - b; }
  SPATTN_SIMD_INLINE Reg select(Int mask, Reg yes, Reg no) {
    return reinterpret_cast<Reg>((reinterpret_cast<Int>(yes) & mask) |
                                 (reinterpret_cast<Int>(no) & ~mask));
  }
  SPATTN_SIMD_INLINE Reg max(Reg a, Reg b) { return select(a > b, a, b); }

  // 2^x as on the other paths: n = round(x) (floor of x + 1/2), the minimax
  // polynomial 1 + f * q(f), 2^n built in the exponent field; x is clamped
  // to [-127, 127] and x <= -127 gives 0; NaN stays NaN (both comparisons
  // are false for it).
  SPATTN_SIMD_INLINE Reg exp2(Reg x) {
    x = select(x < set1(-127.0f), set1(-127.0f), x);
    x = select(x > set1(127.0f), set1(127.0f), x);
    const Reg y = x + set1(0.5f);
    Int n = __builtin_convertvector(y, Int);  // truncates toward zero
    const Int too_big = __builtin_convertvector(n, Reg) > y;
    n += too_big;  // mask lanes are -1: floor for negative y
    const Reg f = x - __builtin_convertvector(n, Reg);
    Reg p = set1(1.3264727313e-03f);
    p = p * f + set1(9.6715129912e-03f);
    p = p * f + set1(5.5507335812e-02f);
    p = p * f + set1(2.4022242427e-01f);
    p = p * f + set1(6.9314700365e-01f);
    p = p * f + set1(1.0f);
    const Int bits = (n + 127) << 23;
    return p * reinterpret_cast<Reg>(bits);
  }
  SPATTN_SIMD_INLINE Reg keep(Reg s, uint32_t lanes) {
    const Int lane_bit = Int{1, 2, 4, 8};
    const Int lanes_v = Int{0, 0, 0, 0} + static_cast<int32_t>(lanes);
    return select((lanes_v & lane_bit) != 0, s, set1(-__builtin_inff()));
  }
  SPATTN_SIMD_INLINE Reg finite_or_zero(Reg m) { return select(m == set1(-__builtin_inff()), zero(), m); }
};

#undef SPATTN_SIMD_INLINE

using Kernel = TileGroupKernel<Portable, 2, 4, 4, 64>;

// Runs the kernel with denormals flushed to zero where the target has SSE's
// MXCSR (see simd_avx512.cpp for why); elsewhere it runs as is.
void run_flushing_denormals(const TileGroupArgs& args) {
#if defined(__SSE__)
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);
  Kernel::run(args);
  _mm_setcsr(saved);
#else
  Kernel::run(args);
#endif
}

void transpose(const float* src, int64_t src_stride, int64_t rows, int64_t cols, const float* col_scale,
               float* dst, int64_t dst_stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * dst_stride + r] = src[r * src_stride + c] * col_scale[c];
}

const TileKernel kPortableKernel{"portable",        Kernel::M,     Kernel::kChunk,
                                 Kernel::kValuePanel, &run_flushing_denormals, &transpose,
                                 &FmaLoop<Portable, 8>::run, &transpose};

}  // namespace

const TileKernel* portable_tile_kernel() { return &kPortableKernel; }

}  // namespace spattn::cpu_fast
