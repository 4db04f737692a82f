// tests/cpp/test_support.hpp - shared helpers for the C++ test suites.
//
// Owning host tensors in any dtype and layout filled with fresh random data,
// output poisoning, an independent dense masked softmax in fp64 (it reads only
// Pattern::allowed, never the BlockMask), and error norms.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "spattn/spattn.hpp"

namespace spattn::testing {

enum class Layout { BHLD, BLHD };

// A host buffer plus its view; the data lives as long as the object.
struct HostTensor {
  std::vector<unsigned char> bytes;
  TensorView view;

  HostTensor(DType dtype, int64_t B, int64_t H, int64_t L, int64_t D, Layout layout = Layout::BHLD);
  // Fills every element with N(0, 1) * amplitude rounded to the dtype.
  void fill_random(std::mt19937_64& rng, double amplitude = 1.0);
  // Writes NaN (or a sentinel for formats without NaN) into every element.
  void poison();
  // All elements as double, in logical (B, H, L, D) order.
  std::vector<double> to_double() const;
};

// O (B, Hq, Lq, D) and LSE (B, Hq, Lq) of masked softmax attention computed
// densely in fp64 from Pattern::allowed. Empty rows: O = 0, LSE = -inf.
struct DenseResult {
  std::vector<double> out;
  std::vector<double> lse;
};
DenseResult dense_masked_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const Pattern& pattern, double scale);

// ||a - b|| / ||b|| (returns ||a|| when ||b|| == 0).
double relative_error(const std::vector<double>& a, const std::vector<double>& b);
// max |a - b| over finite pairs; returns +inf if exactly one of a pair is -inf,
// or if either is NaN.
double max_lse_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace spattn::testing
