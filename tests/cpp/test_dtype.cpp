// tests/cpp/test_dtype.cpp - scalar conversions and dtype names.
//
// fp16 is checked against the compiler's own _Float16 (GCC >= 12 on x86-64
// converts in software with IEEE round-to-nearest-even): every one of the
// 65536 half patterns for half -> float, and millions of floats for
// float -> half (every sign/exponent/top-mantissa combination with the
// rounding-relevant low bits at their boundaries, plus uniform random bit
// patterns). bf16 is checked against a plain decode-and-compare rounding
// written here. The load/store helpers used by every CPU backend are checked
// to round the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

uint16_t compiler_half_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

uint16_t compiler_half_bits_from_double(double x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}

float compiler_half_to_float(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}

bool half_is_nan(uint16_t u) { return (u & 0x7c00u) == 0x7c00u && (u & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t u) { return (u & 0x7f80u) == 0x7f80u && (u & 0x7fu) != 0; }

// Checks float_to_half(f) against the compiler; NaNs must stay NaN with their sign.
void expect_half_matches(float f) {
  const uint16_t got = float_to_half(f), want = compiler_half_bits(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(half_is_nan(got)) << "float bits 0x" << std::hex << float_bits(f);
    ASSERT_EQ(got & 0x8000u, want & 0x8000u) << "float bits 0x" << std::hex << float_bits(f);
    return;
  }
  ASSERT_EQ(got, want) << std::hex << "float bits 0x" << float_bits(f) << " (" << std::scientific
                       << f << ")";
}

// Round-to-nearest-even of a finite or infinite double to bf16, computed on
// the value: scale |x| so one bf16 quantum is 1, split off the fraction
// (exact in double) and round the integer part. bf16 has 8 significant bits
// and its smallest quantum is 2^-133.
uint16_t independent_bf16(double x) {
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(x);
  if (std::isinf(a)) return static_cast<uint16_t>(sign | 0x7f80u);
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const int quantum = std::max(e - 8, -133);
  const double n = std::ldexp(a, -quantum);
  double whole = std::floor(n);
  const double frac = n - whole;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(whole, 2.0) == 1.0)) whole += 1.0;
  const double rounded = std::ldexp(whole, quantum);
  if (rounded >= 0x1p128) return static_cast<uint16_t>(sign | 0x7f80u);
  return static_cast<uint16_t>(sign | (float_bits(static_cast<float>(rounded)) >> 16));
}

void expect_bf16_matches(float f) {
  const uint16_t got = float_to_bf16(f);
  if (std::isnan(f)) {
    ASSERT_TRUE(bf16_is_nan(got)) << "float bits 0x" << std::hex << float_bits(f);
    ASSERT_EQ(got & 0x8000u, (float_bits(f) >> 16) & 0x8000u);
    return;
  }
  ASSERT_EQ(got, independent_bf16(f))
      << std::hex << "float bits 0x" << float_bits(f) << " (" << std::scientific << f << ")";
}

// Low-bit endings that decide rounding: zero, just below/at/above the
// halfway point for shifts of 13 (normal halves) and 16 (bf16), and all ones.
const uint32_t kLowEndings[] = {0x0000u, 0x0001u, 0x0fffu, 0x1000u, 0x1001u,
                                0x1fffu, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};

TEST(DType, HalfToFloatAllPatterns) {
  for (uint32_t u = 0; u < 65536u; ++u) {
    const uint16_t h = static_cast<uint16_t>(u);
    const float got = half_to_float(h), want = compiler_half_to_float(h);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << u;
      ASSERT_EQ(float_bits(got) >> 31, u >> 15) << "half 0x" << std::hex << u;
      continue;
    }
    ASSERT_EQ(float_bits(got), float_bits(want)) << "half 0x" << std::hex << u;
  }
}

TEST(DType, HalfRoundTripsThroughFloat) {
  for (uint32_t u = 0; u < 65536u; ++u) {
    const uint16_t h = static_cast<uint16_t>(u);
    if (half_is_nan(h)) continue;
    ASSERT_EQ(float_to_half(half_to_float(h)), h) << "half 0x" << std::hex << u;
  }
}

TEST(DType, FloatToHalfAtEveryRoundingBoundary) {
  // Sign, exponent and the top 11 mantissa bits take every value; the low 12
  // bits take each rounding-relevant ending.
  for (uint32_t top = 0; top < (1u << 20); ++top) {
    for (uint32_t low : kLowEndings) {
      expect_half_matches(bits_float((top << 12) | (low & 0xfffu)));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(DType, FloatToHalfRandomBits) {
  std::mt19937_64 rng(11);
  for (int n = 0; n < 2000000; ++n) {
    expect_half_matches(bits_float(static_cast<uint32_t>(rng())));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(DType, FloatToHalfSubnormalsTiesAndOverflow) {
  // Exact halfway points between neighbouring halves (normal and subnormal)
  // must go to the even neighbour.
  for (uint32_t h = 0; h < 0x7bffu; ++h) {
    const float mid = 0.5f * (half_to_float(static_cast<uint16_t>(h)) +
                              half_to_float(static_cast<uint16_t>(h + 1)));
    expect_half_matches(mid);
    expect_half_matches(-mid);
    expect_half_matches(std::nextafter(mid, 0.0f));
    expect_half_matches(std::nextafter(mid, 1e9f));
    if (::testing::Test::HasFatalFailure()) return;
  }
  // Around the largest half (65504) and the overflow threshold (65520).
  for (float f :
       {65504.0f, 65519.0f, 65519.99f, 65520.0f, 65536.0f, 1e10f, std::numeric_limits<float>::max(),
        std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
        2.9802322e-8f, 2.9802326e-8f, 5.9604645e-8f, 8.940697e-8f, 6.097555e-5f, 6.1035156e-5f}) {
    expect_half_matches(f);
    expect_half_matches(-f);
  }
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00u);
  EXPECT_EQ(float_to_half(65519.0f), 0x7bffu);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000u);
  EXPECT_TRUE(half_is_nan(float_to_half(std::numeric_limits<float>::quiet_NaN())));
}

TEST(DType, Bf16ToFloatAllPatterns) {
  for (uint32_t u = 0; u < 65536u; ++u) {
    const float f = bf16_to_float(static_cast<uint16_t>(u));
    ASSERT_EQ(float_bits(f), u << 16) << "bf16 0x" << std::hex << u;
    if (!bf16_is_nan(static_cast<uint16_t>(u))) {
      ASSERT_EQ(float_to_bf16(f), u) << "bf16 0x" << std::hex << u;
    }
  }
}

TEST(DType, FloatToBf16AtEveryRoundingBoundary) {
  for (uint32_t top = 0; top < (1u << 16); ++top) {
    for (uint32_t low : kLowEndings) {
      expect_bf16_matches(bits_float((top << 16) | low));
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

TEST(DType, FloatToBf16RandomBitsAndSpecials) {
  std::mt19937_64 rng(12);
  for (int n = 0; n < 2000000; ++n) {
    expect_bf16_matches(bits_float(static_cast<uint32_t>(rng())));
    if (::testing::Test::HasFatalFailure()) return;
  }
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80u);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80u);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80u);            // tie, even is down
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-7f + 0x1p-8f), 0x3f82u);  // tie, even is up
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(bf16_is_nan(float_to_bf16(bits_float(0x7f800001u))));  // low-payload NaN stays NaN
}

// store_from_double rounds a double once to the target type (no double
// rounding through float), and load_as_double reads it back exactly.
TEST(DType, StoreFromDoubleRoundsOnce) {
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  for (int n = 0; n < 200000; ++n) {
    const double x = std::ldexp(unit(rng), static_cast<int>(rng() % 50) - 32);
    uint16_t h = 0;
    store_from_double(&h, DType::F16, 0, x);
    ASSERT_EQ(h, compiler_half_bits_from_double(x)) << std::hexfloat << x;
    ASSERT_EQ(load_as_double(&h, DType::F16, 0), static_cast<double>(half_to_float(h)));
    uint16_t b = 0;
    store_from_double(&b, DType::BF16, 0, x);
    ASSERT_EQ(b, independent_bf16(x)) << std::hexfloat << x;
    ASSERT_EQ(load_as_double(&b, DType::BF16, 0), static_cast<double>(bf16_to_float(b)));
  }
  // Beyond float's range and below its smallest subnormal.
  for (double x : {1e300, -1e300, 1e-300, -1e-300, 0x1p-140, 0x1.8p-134, 0x1.80001p-134}) {
    uint16_t h = 0, b = 0;
    store_from_double(&h, DType::F16, 0, x);
    store_from_double(&b, DType::BF16, 0, x);
    EXPECT_EQ(h, compiler_half_bits_from_double(x)) << std::hexfloat << x;
    EXPECT_EQ(b, independent_bf16(x)) << std::hexfloat << x;
  }
  // Just above a half tie: a double that float would round onto the tie.
  const double above_tie = 1.0 + 0x1p-11 + 0x1p-40;
  uint16_t h = 0;
  store_from_double(&h, DType::F16, 0, above_tie);
  EXPECT_EQ(h, 0x3c01u);
  uint16_t b = 0;
  store_from_double(&b, DType::BF16, 0, 1.0 + 0x1p-8 + 0x1p-40);
  EXPECT_EQ(b, 0x3f81u);
}

TEST(DType, LoadStoreEveryType) {
  const double values[] = {0.0, -1.5, 3.140625, -65504.0, 1e-3};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    std::vector<unsigned char> buf(static_cast<size_t>(dtype_size(t) * 5));
    for (int n = 0; n < 5; ++n) store_from_double(buf.data(), t, n, values[n]);
    for (int n = 0; n < 5; ++n) {
      const double got = load_as_double(buf.data(), t, n);
      double want = values[n];
      if (t == DType::F32) want = static_cast<float>(want);
      if (t == DType::F16) want = half_to_float(float_to_half(static_cast<float>(want)));
      if (t == DType::BF16) want = bf16_to_float(float_to_bf16(static_cast<float>(want)));
      EXPECT_EQ(got, want) << dtype_name(t) << " value " << values[n];
    }
  }
}

TEST(DType, NamesSizesAndParsing) {
  EXPECT_EQ(dtype_size(DType::F32), 4);
  EXPECT_EQ(dtype_size(DType::F16), 2);
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::F64), 8);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64})
    EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  EXPECT_EQ(parse_dtype("float16"), DType::F16);
  EXPECT_EQ(parse_dtype("bfloat16"), DType::BF16);
}

TEST(DType, ParseRejectsUnknownNames) {
  for (const char* bad : {"fp8", "", "FP32x", "int8"}) {
    try {
      parse_dtype(bad);
      ADD_FAILURE() << "parse_dtype accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("dtype"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
  try {
    parse_dtype("half8", "out_dtype");
    ADD_FAILURE() << "parse_dtype accepted 'half8'";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("out_dtype"), std::string::npos) << msg;
    EXPECT_NE(msg.find("half8"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace spattn
