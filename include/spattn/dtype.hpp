// spattn/dtype.hpp - element types and scalar conversions on the host.
//
// Tensors hold fp32, fp16, bf16 or fp64 (fp64 is for the reference backend and
// tests). fp16/bf16 are stored as raw 16-bit patterns; the conversions below are
// exact IEEE round-to-nearest-even and are used by every CPU code path.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace spattn {

enum class DType : int32_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3 };

inline int64_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::F16: return "fp16";
    case DType::BF16: return "bf16";
    case DType::F64: return "fp64";
  }
  return "?";
}

// Parses "fp32" / "fp16" / "bf16" / "fp64"; throws spattn::Error naming `param`.
DType parse_dtype(const std::string& name, const char* param = "dtype");

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(u >> 16);
}

inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return bits_float(sign);
  // subnormal half: value = man * 2^-24
  const float v = static_cast<float>(man) * 5.9604644775390625e-8f;
  return (h & 0x8000u) ? -v : v;
}

inline uint16_t float_to_half(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return sign;  // rounds to zero
    const uint32_t exp = abs >> 23;
    const uint32_t man = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // 14 + (113 - exp) - 1
    uint32_t half_man = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half_man & 1u))) ++half_man;
    return static_cast<uint16_t>(sign | half_man);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  rounded -= 0x38000000u;  // rebias exponent 127 -> 15
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

// Narrows a double to float rounding toward zero and forcing the last bit to 1
// when inexact (round to odd). A second rounding of the result to fp16 or bf16
// (at least 2 bits narrower) then equals rounding the double directly.
inline float double_to_float_round_odd(double x) {
  const float f = static_cast<float>(x);
  if (x != x || static_cast<double>(f) == x) return f;
  uint32_t u = float_bits(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(x)) --u;  // step toward zero
  return bits_float(u | 1u);
}

// Reads element `index` of a buffer of type `t` as double.
inline double load_as_double(const void* base, DType t, int64_t index) {
  switch (t) {
    case DType::F32: return static_cast<const float*>(base)[index];
    case DType::F16: return half_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::BF16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::F64: return static_cast<const double*>(base)[index];
  }
  return 0.0;
}

// Writes `value` (rounded to `t`) at element `index`.
inline void store_from_double(void* base, DType t, int64_t index, double value) {
  switch (t) {
    case DType::F32: static_cast<float*>(base)[index] = static_cast<float>(value); return;
    case DType::F16: static_cast<uint16_t*>(base)[index] = float_to_half(double_to_float_round_odd(value)); return;
    case DType::BF16: static_cast<uint16_t*>(base)[index] = float_to_bf16(double_to_float_round_odd(value)); return;
    case DType::F64: static_cast<double*>(base)[index] = value; return;
  }
}

}  // namespace spattn
