// pattern/terms/dense.hpp - the dense kind (TermKind::Dense): every key; with
// the causal flag, the "causal" pattern. Its forms, as term_kinds.hpp lists
// them.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn::terms {

struct Dense {
  SPATTN_HD static bool allows(const PatternTerm&, int64_t, int64_t, int64_t, int64_t) { return true; }

  SPATTN_HD static int64_t count_row(const PatternTerm&, int64_t, int64_t, int64_t,
                                     const int64_t& j0, const int64_t& j1) {
    return j1 - j0 + 1;
  }

  SPATTN_HD static BlockClass classify_block(const PatternTerm&, int64_t, const BlockRect& r, bool causal) {
    return causal ? block_classify::causal_prefix(r) : BlockClass::Full;
  }

  static void key_intervals(const PatternTerm&, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t k_len,
                            std::vector<KeyInterval>& out) {
    out.push_back({0, k_len - 1});
  }

  static uint64_t lane_bits(const PatternTerm&, int64_t, const TileLanes& lanes, int64_t) { return lanes.all(); }
};

}  // namespace spattn::terms
