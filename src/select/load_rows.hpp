// select/load_rows.hpp - reading rows of a TensorView head into a dense
// row-major buffer, or summing them, in float or double, with one dtype
// dispatch per call (not per element), for any strides.
#pragma once

#include <cstdint>

#include "spattn/dtype.hpp"
#include "spattn/tensor.hpp"

namespace spattn::select_detail {

template <typename Out, typename Elem, typename Convert>
void gather_rows(const Elem* base, const TensorView& t, int64_t b, int64_t h, int64_t l0, int64_t l1,
                 Out* out, Convert convert) {
  const int64_t D = t.head_dim();
  const int64_t step = t.stride[3];
  for (int64_t l = l0; l < l1; ++l) {
    const Elem* row = base + t.offset(b, h, l, 0);
    Out* dst = out + (l - l0) * D;
    if (step == 1) {  // the common layouts: a loop the compiler vectorizes
      for (int64_t d = 0; d < D; ++d) dst[d] = static_cast<Out>(convert(row[d]));
    } else {
      for (int64_t d = 0; d < D; ++d) dst[d] = static_cast<Out>(convert(row[d * step]));
    }
  }
}

// Adds rows [l0, l1) of head h of batch element b into sum[0, D).
template <typename Out, typename Elem, typename Convert>
void sum_rows(const Elem* base, const TensorView& t, int64_t b, int64_t h, int64_t l0, int64_t l1, Out* sum,
              Convert convert) {
  const int64_t D = t.head_dim(), step = t.stride[3];
  for (int64_t l = l0; l < l1; ++l) {
    const Elem* row = base + t.offset(b, h, l, 0);
    if (step == 1) {
      for (int64_t d = 0; d < D; ++d) sum[d] += static_cast<Out>(convert(row[d]));
    } else {
      for (int64_t d = 0; d < D; ++d) sum[d] += static_cast<Out>(convert(row[d * step]));
    }
  }
}

// Calls visit(base, convert) with the typed base pointer of t and the
// element-to-float conversion of its dtype.
template <typename Visit>
void with_elements(const TensorView& t, Visit visit) {
  switch (t.dtype) {
    case DType::F32: visit(static_cast<const float*>(t.data), [](float x) { return x; }); return;
    case DType::F64: visit(static_cast<const double*>(t.data), [](double x) { return x; }); return;
    case DType::F16: visit(static_cast<const uint16_t*>(t.data), half_to_float); return;
    case DType::BF16: visit(static_cast<const uint16_t*>(t.data), bf16_to_float); return;
  }
}

// Rows [l0, l1) of head h of batch element b, as (l1 - l0, D) values of type Out.
template <typename Out>
void load_rows(const TensorView& t, int64_t b, int64_t h, int64_t l0, int64_t l1, Out* out) {
  with_elements(t, [&](const auto* base, auto convert) { gather_rows(base, t, b, h, l0, l1, out, convert); });
}

// Adds rows [l0, l1) of head h of batch element b into sum (D values).
template <typename Out>
void add_rows(const TensorView& t, int64_t b, int64_t h, int64_t l0, int64_t l1, Out* sum) {
  with_elements(t, [&](const auto* base, auto convert) { sum_rows(base, t, b, h, l0, l1, sum, convert); });
}

}  // namespace spattn::select_detail
