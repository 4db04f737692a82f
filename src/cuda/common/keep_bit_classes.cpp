// cuda/common/keep_bit_classes.cpp - the head classes of a call's keep-bits
// table (see keep_bit_classes.hpp).
#include "cuda/common/keep_bit_classes.hpp"

#include <numeric>

#include "spattn/pattern.hpp"

namespace spattn::cuda_detail {

int32_t keep_bit_classes(const FwdParams& p, const BlockMask& mask) {
  if (p.varlen.cu_seqlens_q != nullptr || p.packed.any()) return 0;
  const int64_t heads_per_mask_head = p.q_heads / mask.num_heads();
  if (heads_per_mask_head <= 1) return 1;
  int64_t rates = 1;
  bool per_head = false;
  if (const Pattern* pattern = mask.pattern()) {
    const int64_t exprs = pattern->num_exprs();
    if (exprs > 1 && (p.q_heads / exprs) % heads_per_mask_head != 0) per_head = true;
    for (const PatternExpr& e : pattern->exprs())
      for (int32_t n = 0; n < e.num_terms; ++n) {
        const PatternTerm& t = e.terms[n];
        if (t.kind == TermKind::Dilated && t.b > 1) rates = std::lcm(rates, t.b);
        if (t.kind == TermKind::Custom && t.table_heads > 1) per_head = true;
      }
  }
  if (p.exclude.kind != Exclusion::None) {
    rates = std::lcm(rates, p.exclude.rate);
    if (p.exclude.runs_per_head) per_head = true;
  }
  if (per_head || heads_per_mask_head % rates != 0) return static_cast<int32_t>(heads_per_mask_head);
  return static_cast<int32_t>(rates);
}

}  // namespace spattn::cuda_detail
