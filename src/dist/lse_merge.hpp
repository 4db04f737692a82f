// dist/lse_merge.hpp - how two results of one query row over disjoint key
// sets combine, written once for the host and device merges of
// context-parallel attention (cp_tensor_ops).
#pragma once

#include <cmath>

#include "spattn/hd.hpp"

namespace spattn::dist::detail {

// The weights of sides a and b and the LSE of their union. A side whose LSE
// is -inf weighs 0 (both -inf: LSE -inf, weights 0); a NaN LSE on either side
// makes the LSE and both weights NaN.
struct LseMerge {
  float w_a = 0.0f, w_b = 0.0f, lse = -INFINITY;

  SPATTN_HD static LseMerge of(float lse_a, float lse_b) {
    LseMerge m;
    if (std::isnan(lse_a) || std::isnan(lse_b)) {
      m.w_a = m.w_b = m.lse = lse_a + lse_b;
      return m;
    }
    if (lse_b == -INFINITY) {
      m.lse = lse_a;
      m.w_a = lse_a == -INFINITY ? 0.0f : 1.0f;
      return m;
    }
    if (lse_a == -INFINITY) {
      m.lse = lse_b;
      m.w_b = 1.0f;
      return m;
    }
    const float hi = fmaxf(lse_a, lse_b), lo = fminf(lse_a, lse_b);
    m.lse = hi + log1pf(expf(lo - hi));
    m.w_a = expf(lse_a - m.lse);
    m.w_b = expf(lse_b - m.lse);
    return m;
  }
};

}  // namespace spattn::dist::detail
