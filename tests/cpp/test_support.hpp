// tests/cpp/test_support.hpp - shared helpers for the C++ test suites.
//
// Owning host tensors in any dtype and layout filled with fresh random data,
// output poisoning, an independent dense masked softmax in fp64 (it reads only
// Pattern::allowed, never the BlockMask), and error norms.
#pragma once

#include <cstdint>
#include <random>
#include <string>
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

// dq, dk, dv of dense masked softmax attention in fp64 from Pattern::allowed,
// for output gradient d_out and (if not null) LSE gradient d_lse (B, Hq, Lq):
// with P the row's softmax weights and dP_j = d_out . v_j,
// dS_j = P_j (dP_j - sum_l P_l dP_l) + d_lse P_j. Logical (B, H, L, D) order.
struct DenseGrads {
  std::vector<double> dq, dk, dv;
};
DenseGrads dense_masked_attention_backward(const TensorView& q, const TensorView& k, const TensorView& v,
                                           const TensorView& d_out, const TensorView* d_lse,
                                           const Pattern& pattern, double scale);

// Random inputs with a few non-finite entries, for the semantics of
// attention.hpp ("Non-finite inputs"). Each case writes its entries into
// q, k, v (B >= 1, Hq >= 1, Hkv = 1, Lq = Lk >= 60, D >= 8, causal or wider
// patterns): a NaN query element, a NaN key element, a +inf key element
// (rows whose query has the matching sign get a +inf score, the others -inf),
// a row whose every allowed score is -inf, and a NaN value element.
struct NonFiniteCase {
  const char* name;
  void (*inject)(HostTensor& q, HostTensor& k, HostTensor& v);
  int64_t nan_value_column;  // the column a NaN value may spread into (-1: none)
};
const std::vector<NonFiniteCase>& nonfinite_cases();

// Compares a backend's out and LSE with the fp64 oracle of the same inputs
// element by element: where the oracle is NaN the backend must be NaN; where
// it is finite (or -inf) the backend must agree, to `tolerance` relative to
// the largest oracle output of the row (and the LSE to lse_tolerance), except
// column `unchecked_column` of rows the oracle leaves finite there (what a
// NaN value at a key of weight 0 gives is not specified). Returns "" or the
// first disagreement.
std::string compare_nonfinite(const std::vector<double>& out, const std::vector<double>& lse,
                              const DenseResult& oracle, int64_t head_dim, double tolerance,
                              double lse_tolerance, int64_t unchecked_column);

// ||a - b|| / ||b|| (returns ||a|| when ||b|| == 0).
double relative_error(const std::vector<double>& a, const std::vector<double>& b);
// max |a - b| over finite pairs; returns +inf if exactly one of a pair is -inf,
// or if either is NaN.
double max_lse_error(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace spattn::testing
