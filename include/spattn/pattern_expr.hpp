// spattn/pattern_expr.hpp - a pattern as plain data: terms and their OR/AND.
//
// A pattern is, per head, an OR or AND of up to kMaxTerms terms. A term is a
// plain struct (kind, causal flag, three integer parameters, pointers to
// read-only tables), so the same code runs on the host and on the GPU. What
// each kind means, and everything derived from it, is in the kind's own file
// (pattern/terms/<kind>.hpp); spattn/pattern_terms.hpp is the predicate. An
// expression may carry a frame: the call it serves is one rectangle of a
// larger problem (context parallelism), and the predicate is asked there.
#pragma once

#include <cstdint>

namespace spattn {

enum class TermKind : int32_t {
  Dense = 0,          // every key (with causal: the "causal" pattern)
  BlockDiagonal = 1,  // a = block size B: floor(p/B) == floor(j/B)
  SlidingWindow = 2,  // a = left, b = right: p - left <= j <= p + right
  Streaming = 3,      // a = sink S, b = window W (causal): j < S or p - j < W
  Strided = 4,        // a = stride l (causal): p - j < l or (p - j) % l == 0
  Fixed = 5,          // a = stride l, b = summary c (causal): same l-segment or j % l >= l - c
  Dilated = 6,        // a = segment w, b = rate r: same w-segment and p % r == j % r == h % r
  BigBird = 7,        // a = block B, b = window blocks w, c = global blocks g; table = random blocks
  Longformer = 8,     // a = window W: |p - j| <= W/2, or j in G, or p in G; tokens = G (sorted)
  Custom = 9,         // a = block_q, b = block_k; CSR of kept blocks on the (i, j) grid
};

constexpr int kMaxTerms = 8;

struct PatternTerm {
  TermKind kind = TermKind::Dense;
  int32_t causal = 0;
  int64_t a = 0, b = 0, c = 0;
  // BigBird: random blocks, table_rows x table_width int32 (-1 = unused slot).
  // Custom: CSR column indices; offsets has table_heads * table_rows + 1 entries.
  const int32_t* indices = nullptr;
  const int64_t* offsets = nullptr;
  // Longformer: sorted global token positions.
  const int64_t* tokens = nullptr;
  int64_t table_rows = 0;   // BigBird: blocks n; Custom: query-block rows per head
  int64_t table_width = 0;  // BigBird: random blocks r; Custom: key-block columns
  int64_t table_heads = 0;  // Custom: 1 (shared) or H
  int64_t num_tokens = 0;   // Longformer: |G|
};

enum class ExprOp : int32_t { Or = 0, And = 1 };

// Where a call's rows and keys sit in a larger q_len x k_len problem. Off (the
// default): query row i of the call is at position p = i + (Lk - Lq) and key j
// is key j. On: row i is row `row + i` of the larger problem, at its position
// `position + i` (position = row + k_len - q_len, bottom-right aligned there),
// and key j is key `key + j`. The predicate functions (pattern_terms.hpp,
// block_classify.hpp and the kernels' word forms) translate a call's
// coordinates through it once, on entry.
struct PositionFrame {
  int32_t on = 0;
  int64_t row = 0, position = 0, key = 0;
  int64_t q_len = 0, k_len = 0;  // the larger problem's lengths (host checks only)
};

struct PatternExpr {
  ExprOp op = ExprOp::Or;
  int32_t num_terms = 0;
  PatternTerm terms[kMaxTerms];
  PositionFrame frame;
};

}  // namespace spattn
