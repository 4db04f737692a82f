// cuda/common/exp2_poly.cuh - 2^x on the FMA pipe, for the part of a softmax
// tile that the kernels move off the special-function unit.
//
// ex2.approx runs on the MUFU unit at 16 results per clock per SM, as many
// as one bf16 m64n128k16 wgmma at head dim 64 needs for its 64 x 128 scores,
// so at small head dims the exponentials bound the tile. exp2_poly splits x
// into floor(x) (rounding 1.5 * 2^23 + x down, which leaves floor(x) in the
// low mantissa bits) and f = x - floor(x) in [0, 1), evaluates a cubic for
// 2^f and adds floor(x) to the exponent field: nine FMA/ALU instructions.
// The cubic is fixed at p(0) = 1 and p(1) = 2 (continuous across integers)
// and fitted for relative error (at most 1.03e-4 on [0, 1), well below
// bf16's and fp16's rounding of P). Inputs are clamped at -127, where p(0) = 1
// gives the bit pattern of +0 exactly, so masked scores (-inf) give P = 0 as
// they do through ex2.approx.
#pragma once

namespace spattn::cuda_detail {

__device__ __forceinline__ float exp2_poly(float x) {
  constexpr float kRoundShift = 12582912.0f;  // 1.5 * 2^23
  x = fmaxf(x, -127.0f);
  const float shifted = __fadd_rd(x, kRoundShift);
  const float f = x - (shifted - kRoundShift);
  float p = fmaf(f, 0.07826797f, 0.22630768f);
  p = fmaf(p, f, 0.6954243f);
  p = fmaf(p, f, 1.0f);
  // Unsigned arithmetic: the shift and the add wrap (floor(x) < 0) by design.
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(shifted) << 23));
}

}  // namespace spattn::cuda_detail
