// pattern.cpp - pattern builders, validation and composition.
//
// Each builder checks its parameters (spattn::Error naming the parameter and
// value) and produces one PatternTerm; composites combine the terms of their
// operands into one flat OR/AND expression per head. The predicate itself lives
// in pattern_terms.hpp.
#include "spattn/pattern.hpp"

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>

#include "pattern/pattern_tables.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

void require_positive(int64_t value, const char* param) {
  require(value > 0, param, " must be > 0, got ", value);
}
void require_non_negative(int64_t value, const char* param) {
  require(value >= 0, param, " must be >= 0, got ", value);
}

using pattern_math::ceil_div;

// Window-like extents of 2^62 already reach every key of any problem
// BlockMask::build accepts (Lq + Lk <= 2^62), so larger ones (INT64_MAX for
// "unbounded") are stored clamped: p +- extent then never overflows.
constexpr int64_t kUnboundedExtent = int64_t{1} << 62;
int64_t clamp_extent(int64_t value) { return std::min(value, kUnboundedExtent); }

}  // namespace

Pattern Pattern::single(const PatternTerm& term, std::shared_ptr<const Tables> tables) {
  Pattern p;
  PatternExpr e;
  e.op = ExprOp::Or;
  e.num_terms = 1;
  e.terms[0] = term;
  p.exprs_.push_back(e);
  if (tables) p.tables_.push_back(std::move(tables));
  return p;
}

Pattern Pattern::dense(bool causal) {
  PatternTerm t;
  t.kind = TermKind::Dense;
  t.causal = causal;
  return single(t);
}

Pattern Pattern::causal() { return dense(true); }

Pattern Pattern::block_diagonal(int64_t block, bool causal) {
  require_positive(block, "block");
  PatternTerm t;
  t.kind = TermKind::BlockDiagonal;
  t.causal = causal;
  t.a = block;
  return single(t);
}

Pattern Pattern::sliding_window(int64_t left, int64_t right, bool causal) {
  require_non_negative(left, "window_left");
  require_non_negative(right, "window_right");
  PatternTerm t;
  t.kind = TermKind::SlidingWindow;
  t.causal = causal;
  t.a = clamp_extent(left);
  t.b = clamp_extent(right);
  return single(t);
}

Pattern Pattern::sliding_window(int64_t window) {
  require_positive(window, "window");
  return sliding_window(window - 1, 0, false);
}

Pattern Pattern::streaming(int64_t sink, int64_t window) {
  require_non_negative(sink, "sink");
  require_positive(window, "window");
  PatternTerm t;
  t.kind = TermKind::Streaming;
  t.causal = 1;
  t.a = clamp_extent(sink);
  t.b = clamp_extent(window);
  return single(t);
}

Pattern Pattern::strided(int64_t stride) {
  require_positive(stride, "stride");
  PatternTerm t;
  t.kind = TermKind::Strided;
  t.causal = 1;
  t.a = clamp_extent(stride);
  return single(t);
}

Pattern Pattern::fixed(int64_t stride, int64_t summary) {
  require_positive(stride, "stride");
  require_non_negative(summary, "summary");
  require(summary <= stride, "summary must be <= stride (", stride, "), got ", summary);
  PatternTerm t;
  t.kind = TermKind::Fixed;
  t.causal = 1;
  t.a = clamp_extent(stride);
  t.b = std::max<int64_t>(0, summary - (stride - t.a));  // keeps the first summary column l - c
  return single(t);
}

Pattern Pattern::dilated(const std::vector<int64_t>& segments, const std::vector<int64_t>& rates,
                         bool causal) {
  require(!segments.empty(), "segments must list at least one segment length, got none");
  require(segments.size() == rates.size(), "segments and rates must have the same length, got ",
          segments.size(), " segments and ", rates.size(), " rates");
  require(segments.size() <= static_cast<size_t>(kMaxTerms), "dilated supports at most ", kMaxTerms,
          " branches, got ", segments.size());
  Pattern result;
  for (size_t n = 0; n < segments.size(); ++n) {
    require(segments[n] > 0, "segments[", n, "] must be > 0, got ", segments[n]);
    require(rates[n] > 0, "rates[", n, "] must be > 0, got ", rates[n]);
    PatternTerm t;
    t.kind = TermKind::Dilated;
    t.causal = causal;
    t.a = segments[n];
    t.b = rates[n];
    result = n == 0 ? single(t) : unite(result, single(t));
  }
  return result;
}

Pattern Pattern::bigbird(int64_t seq_len_k, int64_t block, int64_t window_blocks,
                         int64_t global_blocks, int64_t random_blocks, uint64_t seed, bool causal) {
  require_non_negative(seq_len_k, "seq_len_k");
  require_positive(block, "block");
  require_positive(window_blocks, "window_blocks");
  require_non_negative(global_blocks, "global_blocks");
  require_non_negative(random_blocks, "random_blocks");
  const int64_t n = ceil_div(seq_len_k, block);
  require(random_blocks <= n, "random_blocks must be <= the number of blocks (", n, "), got ",
          random_blocks);
  auto tables = std::make_shared<Tables>();
  tables->indices =
      bigbird_random_blocks(n, window_blocks, global_blocks, random_blocks, seed, causal);
  const PatternTerm t = detail::bigbird_term(block, window_blocks, global_blocks, n, random_blocks,
                                             causal, tables->indices);
  return single(t, tables);
}

Pattern Pattern::longformer(int64_t window, std::vector<int64_t> global_tokens, bool causal) {
  require_non_negative(window, "window");
  for (size_t n = 0; n < global_tokens.size(); ++n)
    require(global_tokens[n] >= 0, "global_tokens[", n, "] must be >= 0, got ", global_tokens[n]);
  std::sort(global_tokens.begin(), global_tokens.end());
  for (size_t n = 1; n < global_tokens.size(); ++n)
    require(global_tokens[n] != global_tokens[n - 1], "global_tokens must not repeat, got ",
            global_tokens[n], " twice");
  auto tables = std::make_shared<Tables>();
  tables->tokens = std::move(global_tokens);
  PatternTerm t;
  t.kind = TermKind::Longformer;
  t.causal = causal;
  t.a = window;
  t.tokens = tables->tokens.data();
  t.num_tokens = static_cast<int64_t>(tables->tokens.size());
  return single(t, tables);
}

Pattern Pattern::custom(const std::vector<uint8_t>& blocks, int64_t heads, int64_t rows,
                        int64_t cols, int64_t block_q, int64_t block_k, bool causal) {
  require_positive(heads, "heads");
  require_non_negative(rows, "rows");
  require_non_negative(cols, "cols");
  require(cols <= std::numeric_limits<int32_t>::max(), "cols must fit in 32 bits, got ", cols);
  require(cols == 0 || rows <= std::numeric_limits<int64_t>::max() / cols / heads,
          "heads*rows*cols overflows: heads=", heads, " rows=", rows, " cols=", cols);
  require(static_cast<int64_t>(blocks.size()) == heads * rows * cols,
          "blocks must hold heads*rows*cols = ", heads * rows * cols, " entries, got ", blocks.size());
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> indices;
  for (int64_t r = 0; r < heads * rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const uint8_t value = blocks[r * cols + c];
      require(value <= 1, "blocks must be 0 or 1, got ", static_cast<int>(value), " at (head ",
              r / rows, ", row ", r % rows, ", col ", c, ")");
      if (value) indices.push_back(static_cast<int32_t>(c));
    }
    offsets.push_back(static_cast<int64_t>(indices.size()));
  }
  return custom_bsr(std::move(offsets), std::move(indices), heads, rows, cols, block_q, block_k,
                    causal);
}

Pattern Pattern::custom_bsr(std::vector<int64_t> offsets, std::vector<int32_t> indices,
                            int64_t heads, int64_t rows, int64_t cols, int64_t block_q,
                            int64_t block_k, bool causal) {
  require_positive(heads, "heads");
  require_non_negative(rows, "rows");
  require_non_negative(cols, "cols");
  require_positive(block_q, "block_q");
  require_positive(block_k, "block_k");
  require(cols <= std::numeric_limits<int32_t>::max(), "cols must fit in 32 bits, got ", cols);
  require(rows <= std::numeric_limits<int64_t>::max() / heads - 1, "heads*rows overflows: heads=",
          heads, " rows=", rows);
  require(static_cast<int64_t>(offsets.size()) == heads * rows + 1,
          "offsets must have heads*rows+1 = ", heads * rows + 1, " entries, got ", offsets.size());
  require(offsets.front() == 0, "offsets[0] must be 0, got ", offsets.front());
  require(offsets.back() == static_cast<int64_t>(indices.size()), "offsets[last] must equal the ",
          "number of indices (", indices.size(), "), got ", offsets.back());
  for (int64_t r = 0; r < heads * rows; ++r) {
    require(offsets[r] <= offsets[r + 1], "offsets must be non-decreasing, got offsets[", r,
            "]=", offsets[r], " > offsets[", r + 1, "]=", offsets[r + 1]);
    for (int64_t at = offsets[r]; at < offsets[r + 1]; ++at) {
      require(indices[at] >= 0 && indices[at] < cols, "indices[", at, "] must be in [0, ", cols,
              "), got ", indices[at]);
      require(at == offsets[r] || indices[at] > indices[at - 1], "indices of row ", r,
              " must be sorted and unique, got ", indices[at - 1], " then ", indices[at]);
    }
  }
  auto tables = std::make_shared<Tables>();
  tables->offsets = std::move(offsets);
  tables->indices = std::move(indices);
  PatternTerm t;
  t.kind = TermKind::Custom;
  t.causal = causal;
  t.a = block_q;
  t.b = block_k;
  t.offsets = tables->offsets.data();
  t.indices = tables->indices.data();
  t.table_rows = rows;
  t.table_width = cols;
  t.table_heads = heads;
  return single(t, tables);
}

namespace {

bool same_frame(const PositionFrame& a, const PositionFrame& b) {
  return a.on == b.on && a.row == b.row && a.position == b.position && a.key == b.key && a.q_len == b.q_len &&
         a.k_len == b.k_len;
}

std::string frame_text(const PositionFrame& f) {
  if (!f.on) return "no frame";
  std::ostringstream os;
  os << "the frame at row " << f.row << ", key " << f.key << " of " << f.q_len << " x " << f.k_len;
  return os.str();
}

}  // namespace

Pattern Pattern::combine(const Pattern& a, const Pattern& b, ExprOp op) {
  const int64_t na = a.num_exprs(), nb = b.num_exprs();
  require(same_frame(a.frame(), b.frame()), "cannot combine a pattern with ", frame_text(a.frame()),
          " and one with ", frame_text(b.frame()));
  require(na == nb || na == 1 || nb == 1, "cannot combine per-head patterns with ", na, " and ", nb,
          " heads");
  Pattern result;
  const int64_t n = std::max(na, nb);
  for (int64_t h = 0; h < n; ++h) {
    const PatternExpr& ea = a.exprs_[na == 1 ? 0 : h];
    const PatternExpr& eb = b.exprs_[nb == 1 ? 0 : h];
    for (const PatternExpr* e : {&ea, &eb})
      require(e->num_terms == 1 || e->op == op, "cannot nest a ",
              e->op == ExprOp::Or ? "union" : "intersection", " inside an ",
              op == ExprOp::Or ? "union" : "intersection");
    require(ea.num_terms + eb.num_terms <= kMaxTerms, "a combined pattern may have at most ",
            kMaxTerms, " terms, got ", ea.num_terms + eb.num_terms);
    PatternExpr e;
    e.op = op;
    e.num_terms = ea.num_terms + eb.num_terms;
    e.frame = ea.frame;
    std::copy(ea.terms, ea.terms + ea.num_terms, e.terms);
    std::copy(eb.terms, eb.terms + eb.num_terms, e.terms + ea.num_terms);
    result.exprs_.push_back(e);
  }
  result.tables_ = a.tables_;
  result.tables_.insert(result.tables_.end(), b.tables_.begin(), b.tables_.end());
  return result;
}

Pattern Pattern::unite(const Pattern& a, const Pattern& b) { return combine(a, b, ExprOp::Or); }

Pattern Pattern::intersect(const Pattern& a, const Pattern& b) {
  return combine(a, b, ExprOp::And);
}

Pattern Pattern::per_head(const std::vector<Pattern>& heads) {
  require(!heads.empty(), "per_head needs at least one pattern, got none");
  Pattern result;
  for (size_t h = 0; h < heads.size(); ++h) {
    require(heads[h].num_exprs() == 1, "per_head: heads[", h, "] is itself per-head (",
            heads[h].num_exprs(), " heads)");
    require(same_frame(heads[h].frame(), heads[0].frame()), "per_head: heads[", h, "] has ",
            frame_text(heads[h].frame()), " but heads[0] has ", frame_text(heads[0].frame()));
    result.exprs_.push_back(heads[h].exprs_[0]);
    result.tables_.insert(result.tables_.end(), heads[h].tables_.begin(), heads[h].tables_.end());
  }
  return result;
}

Pattern Pattern::with_causal() const {
  Pattern result = *this;
  for (PatternExpr& e : result.exprs_)
    for (int32_t n = 0; n < e.num_terms; ++n) e.terms[n].causal = 1;
  return result;
}

Pattern Pattern::within_length(int64_t k_len) const {
  Pattern result = *this;
  for (PatternExpr& e : result.exprs_)
    for (int32_t n = 0; n < e.num_terms; ++n) {
      PatternTerm& t = e.terms[n];
      if (t.kind == TermKind::Longformer)  // tokens are sorted: keep those below k_len
        t.num_tokens = pattern_math::lower_bound(t.tokens, t.num_tokens, k_len);
    }
  return result;
}

Pattern Pattern::framed(int64_t first_row, int64_t first_key, int64_t q_len, int64_t k_len) const {
  require(!frame().on, "the pattern is already framed (", frame_text(frame()), ")");
  require(q_len >= 0, "q_len must be >= 0, got ", q_len);
  require(k_len >= 0, "k_len must be >= 0, got ", k_len);
  require(first_row >= 0 && first_row <= q_len, "first_row must be in [0, q_len=", q_len, "], got ", first_row);
  require(first_key >= 0 && first_key <= k_len, "first_key must be in [0, k_len=", k_len, "], got ", first_key);
  check_lengths(q_len, k_len);
  Pattern result = *this;
  for (PatternExpr& e : result.exprs_) e.frame = PositionFrame{1, first_row, first_row + (k_len - q_len), first_key, q_len, k_len};
  return result;
}

PositionFrame Pattern::frame() const { return exprs_.empty() ? PositionFrame{} : exprs_.front().frame; }

const PatternExpr& Pattern::expr_for_head(int64_t h, int64_t num_heads) const {
  if (exprs_.size() == 1) return exprs_[0];
  require(num_heads > 0 && num_heads % num_exprs() == 0, "num_heads (", num_heads,
          ") must be a positive multiple of the pattern's per-head count (", num_exprs(), ")");
  require(h >= 0 && h < num_heads, "head ", h, " is out of range [0, ", num_heads, ")");
  return exprs_[h / (num_heads / num_exprs())];
}

bool Pattern::head_dependent() const {
  if (exprs_.size() > 1) return true;
  for (const PatternExpr& e : exprs_)
    for (int32_t n = 0; n < e.num_terms; ++n) {
      const PatternTerm& t = e.terms[n];
      if (t.kind == TermKind::Dilated && t.b > 1) return true;
      if (t.kind == TermKind::Custom && t.table_heads > 1) return true;
    }
  return false;
}

bool Pattern::is_prefix_stable() const {
  if (frame().on) return false;  // its rows and keys are those of one larger problem
  for (const PatternExpr& e : exprs_)
    for (int32_t n = 0; n < e.num_terms; ++n)
      if (e.terms[n].kind == TermKind::BigBird || e.terms[n].kind == TermKind::Custom) return false;
  return true;
}

void Pattern::check_lengths(int64_t q_len, int64_t k_len) const {
  if (const PositionFrame f = frame(); f.on) {
    require(f.row + q_len <= f.q_len, "the pattern is framed at row ", f.row, " of ", f.q_len,
            " query rows, so Lq must be <= ", f.q_len - f.row, ", got ", q_len);
    require(f.key + k_len <= f.k_len, "the pattern is framed at key ", f.key, " of ", f.k_len,
            " keys, so Lk must be <= ", f.k_len - f.key, ", got ", k_len);
    q_len = f.q_len;  // the tables below belong to the larger problem
    k_len = f.k_len;
  }
  for (const PatternExpr& e : exprs_)
    for (int32_t n = 0; n < e.num_terms; ++n) {
      const PatternTerm& t = e.terms[n];
      if (t.kind == TermKind::BigBird)
        require(t.table_rows == ceil_div(k_len, t.a), "the bigbird pattern was built for ",
                t.table_rows, " key blocks of ", t.a, " but Lk=", k_len, " needs ",
                ceil_div(k_len, t.a));
      if (t.kind == TermKind::Custom) {
        require(t.table_rows == ceil_div(q_len, t.a), "the custom mask has ", t.table_rows,
                " query-block rows of ", t.a, " but Lq=", q_len, " needs ", ceil_div(q_len, t.a));
        require(t.table_width == ceil_div(k_len, t.b), "the custom mask has ", t.table_width,
                " key-block columns of ", t.b, " but Lk=", k_len, " needs ", ceil_div(k_len, t.b));
      }
      if (t.kind == TermKind::Longformer && t.num_tokens > 0)
        require(t.tokens[t.num_tokens - 1] < k_len, "global_tokens must be < Lk (", k_len,
                "), got ", t.tokens[t.num_tokens - 1]);
    }
}

bool Pattern::allowed(int64_t h, int64_t num_heads, int64_t q_len, int64_t k_len, int64_t i,
                      int64_t j) const {
  return expr_allows(expr_for_head(h, num_heads), h, i, i + (k_len - q_len), j);
}

}  // namespace spattn
