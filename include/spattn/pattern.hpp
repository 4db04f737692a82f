// spattn/pattern.hpp - building sparse attention patterns.
//
// A Pattern owns, per head (or once for all heads), an expression over pattern
// terms (see pattern_terms.hpp for their exact meaning) and the tables some
// terms read (BigBird's random blocks, Longformer's global tokens, custom block
// matrices). Builders validate their parameters and throw spattn::Error naming
// the parameter and its value. Patterns are immutable values; copies share
// their tables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spattn/pattern_terms.hpp"

namespace spattn {

namespace detail {
struct PatternDecoder;  // pattern_codec.cpp: rebuilds terms whose tables builders cannot take
}  // namespace detail

class Pattern {
 public:
  // ---- builders, one per pattern of the design notes ----
  static Pattern dense(bool causal = false);
  static Pattern causal();
  static Pattern block_diagonal(int64_t block, bool causal = false);
  // Inclusive bounds p - left <= j <= p + right (FlashAttention's window_size).
  static Pattern sliding_window(int64_t left, int64_t right, bool causal = false);
  // W keys including the query itself: left = W - 1, right = 0.
  static Pattern sliding_window(int64_t window);
  static Pattern streaming(int64_t sink, int64_t window);
  static Pattern strided(int64_t stride);
  static Pattern fixed(int64_t stride, int64_t summary);
  // Union of branches (segment w_k, rate r_k); segments and rates have equal length.
  static Pattern dilated(const std::vector<int64_t>& segments, const std::vector<int64_t>& rates,
                         bool causal = false);
  // BigBird over key length seq_len_k with `block`-sized blocks. Random blocks
  // come from bigbird_random_blocks() below.
  static Pattern bigbird(int64_t seq_len_k, int64_t block, int64_t window_blocks = 3,
                         int64_t global_blocks = 1, int64_t random_blocks = 3, uint64_t seed = 0,
                         bool causal = false);
  static Pattern longformer(int64_t window, std::vector<int64_t> global_tokens, bool causal = false);
  // Custom block mask from a dense boolean block matrix laid out (heads, rows, cols),
  // heads = 1 (shared) or H. Block (r, c) covers query rows [r*block_q, ...) and
  // keys [c*block_k, ...) on the index grid (no position shift).
  static Pattern custom(const std::vector<uint8_t>& blocks, int64_t heads, int64_t rows, int64_t cols,
                        int64_t block_q, int64_t block_k, bool causal = false);
  // Custom block mask from BSR arrays: offsets has heads*rows+1 entries.
  static Pattern custom_bsr(std::vector<int64_t> offsets, std::vector<int32_t> indices, int64_t heads,
                            int64_t rows, int64_t cols, int64_t block_q, int64_t block_k,
                            bool causal = false);

  // ---- composition ----
  static Pattern unite(const Pattern& a, const Pattern& b);      // allowed in a or b
  static Pattern intersect(const Pattern& a, const Pattern& b);  // allowed in a and b
  static Pattern per_head(const std::vector<Pattern>& heads);    // head h uses heads[h]
  Pattern with_causal() const;                                   // AND j <= p everywhere
  // The same pattern on a sequence of k_len positions: Longformer global
  // tokens at k_len or beyond (which no query or key of that sequence can
  // be) are dropped. Varlen batches share one pattern between sequences of
  // different lengths; this is each sequence's own view of it.
  Pattern within_length(int64_t k_len) const;
  // The pattern as seen by a call whose query rows are rows [first_row,
  // first_row + Lq) and whose keys are keys [first_key, first_key + Lk) of a
  // q_len x k_len problem (bottom-right aligned there): one rank's queries
  // against one peer's keys when a sequence is split over ranks (context
  // parallelism). Every backend then evaluates the pattern at the larger
  // problem's rows, positions and keys. A framed pattern cannot be framed
  // again or combined with a pattern of another frame.
  Pattern framed(int64_t first_row, int64_t first_key, int64_t q_len, int64_t k_len) const;
  // The frame (PositionFrame::on == 0 where there is none; shared by every head).
  PositionFrame frame() const;

  // ---- queries ----
  // Number of expressions: 1 (shared by all heads) or H (one per head).
  int64_t num_exprs() const { return static_cast<int64_t>(exprs_.size()); }
  const PatternExpr& expr_for_head(int64_t h, int64_t num_heads) const;
  const std::vector<PatternExpr>& exprs() const { return exprs_; }
  // True when some term reads the head index (dilated rates, per-head custom tables).
  bool head_dependent() const;
  // Lengths the pattern's tables were made for (0 = any): BigBird's key length,
  // custom masks' grid. A framed pattern checks that the call's rows and keys
  // lie inside the larger problem, and the tables against its lengths.
  void check_lengths(int64_t q_len, int64_t k_len) const;
  // True when, for equal query and key lengths, the pattern on a sequence of
  // length L is the top-left L x L corner of the pattern on any longer one:
  // no term reads the lengths, and every term reads a query only through its
  // position (so Lq < Lk queries, bottom-right aligned, are the last Lq rows
  // of that corner). BigBird (its block count decides the last
  // global blocks and sizes the random table) and custom masks (tables for one
  // block grid) are not. Variable-length batches need it (attention.hpp).
  bool is_prefix_stable() const;
  bool allowed(int64_t h, int64_t num_heads, int64_t q_len, int64_t k_len, int64_t i, int64_t j) const;
  std::string describe() const;

 private:
  struct Tables;
  std::vector<PatternExpr> exprs_;
  std::vector<std::shared_ptr<const Tables>> tables_;

  static Pattern single(const PatternTerm& term, std::shared_ptr<const Tables> tables = nullptr);
  static Pattern combine(const Pattern& a, const Pattern& b, ExprOp op);
  friend struct detail::PatternDecoder;
};

// The documented BigBird random-block generator (splitmix64 seeded by `seed`):
// for each row b of n blocks, draws up to r distinct blocks uniformly among
// those not already kept by the window or global rule (and, when causal, at or
// left of the diagonal), in draw order. Unused slots are -1.
std::vector<int32_t> bigbird_random_blocks(int64_t n, int64_t window_blocks, int64_t global_blocks,
                                           int64_t random_blocks, uint64_t seed, bool causal);

}  // namespace spattn
