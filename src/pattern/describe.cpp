// describe.cpp - a one-line, human-readable description of a Pattern.
#include <sstream>

#include "spattn/pattern.hpp"

namespace spattn {
namespace {

void describe_term(std::ostringstream& os, const PatternTerm& t) {
  switch (t.kind) {
    case TermKind::Dense: os << (t.causal ? "causal" : "dense"); return;
    case TermKind::BlockDiagonal: os << "block-diagonal(block=" << t.a << ")"; break;
    case TermKind::SlidingWindow: os << "sliding-window(left=" << t.a << ",right=" << t.b << ")"; break;
    case TermKind::Streaming: os << "streaming(sink=" << t.a << ",window=" << t.b << ")"; return;
    case TermKind::Strided: os << "strided(stride=" << t.a << ")"; return;
    case TermKind::Fixed: os << "fixed(stride=" << t.a << ",summary=" << t.b << ")"; return;
    case TermKind::Dilated: os << "dilated(segment=" << t.a << ",rate=" << t.b << ")"; break;
    case TermKind::BigBird:
      os << "bigbird(block=" << t.a << ",window_blocks=" << t.b << ",global_blocks=" << t.c
         << ",random_blocks=" << t.table_width << ")";
      break;
    case TermKind::Longformer:
      os << "longformer(window=" << t.a << ",global_tokens=" << t.num_tokens << ")";
      break;
    case TermKind::Custom:
      os << "custom(" << t.table_heads << "x" << t.table_rows << "x" << t.table_width
         << " blocks of " << t.a << "x" << t.b << ")";
      break;
  }
  if (t.causal) os << "+causal";
}

void describe_expr(std::ostringstream& os, const PatternExpr& e) {
  for (int32_t n = 0; n < e.num_terms; ++n) {
    if (n) os << (e.op == ExprOp::Or ? " | " : " & ");
    describe_term(os, e.terms[n]);
  }
}

}  // namespace

std::string Pattern::describe() const {
  std::ostringstream os;
  if (exprs_.size() == 1) {
    describe_expr(os, exprs_[0]);
  } else {
    os << "per-head[";
    for (size_t h = 0; h < exprs_.size(); ++h) {
      if (h) os << "; ";
      os << h << ": ";
      describe_expr(os, exprs_[h]);
    }
    os << "]";
  }
  if (const PositionFrame f = frame(); f.on)
    os << " framed at row " << f.row << ", key " << f.key << " of " << f.q_len << "x" << f.k_len;
  return os.str();
}

}  // namespace spattn
