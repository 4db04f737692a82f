// pattern_codec.cpp - Pattern <-> flat integer arrays (layout in
// spattn/pattern_codec.hpp).
//
// Encoding walks the expressions and writes each term's scalars; the arrays a
// term points to are appended to the tables once per distinct array (terms of
// a per-head pattern usually share them). Decoding checks every size and
// offset before reading, rebuilds each term through its public builder (so the
// builders' validation applies), and recombines the terms of an expression with
// unite/intersect and the expressions with per_head.
#include "spattn/pattern_codec.hpp"

#include <limits>
#include <map>

#include "pattern/pattern_tables.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

enum TermWord : int64_t {
  kKind = 0,
  kCausal,
  kA,
  kB,
  kC,
  kTableRows,
  kTableWidth,
  kTableHeads,
  kNumTokens,
  kIndicesAt,
  kOffsetsAt,
  kTokensAt,
};
static_assert(kTokensAt + 1 == kTermWords, "kTermWords must match the term layout");

constexpr int64_t kHeaderWords = 7;  // version, E, the frame (5)
constexpr int64_t kExprWords = 2;

// Appends each distinct array once and remembers where it went.
template <typename T>
class TableWriter {
 public:
  explicit TableWriter(std::vector<T>& table) : table_(table) {}
  int64_t put(const T* data, int64_t count) {
    if (count == 0) return -1;
    const auto found = at_.find(data);
    if (found != at_.end()) return found->second;
    const int64_t at = static_cast<int64_t>(table_.size());
    table_.insert(table_.end(), data, data + count);
    at_.emplace(data, at);
    return at;
  }

 private:
  std::vector<T>& table_;
  std::map<const T*, int64_t> at_;
};

// Reads the `count` entries at `at` of a table after checking they exist.
template <typename T>
std::vector<T> table_slice(const T* table, int64_t size, int64_t at, int64_t count,
                           const char* table_name, const char* what, int64_t term) {
  require(count >= 0, "term ", term, ": ", what, " count must be >= 0, got ", count);
  if (count == 0) return {};
  require(at >= 0 && at <= size && count <= size - at, "term ", term, ": ", what, " [", at, ", ",
          at, " + ", count, ") lies outside ", table_name, " of ", size, " entries");
  return std::vector<T>(table + at, table + at + count);
}

void require_flag(int64_t value, const char* name, int64_t term) {
  require(value == 0 || value == 1, "term ", term, ": ", name, " must be 0 or 1, got ", value);
}

}  // namespace

// Friend of Pattern: rebuilds the terms no public builder can take as they are.
struct detail::PatternDecoder {
  // BigBird with its random-block table given (the builder would draw it).
  static Pattern bigbird(int64_t block, int64_t window_blocks, int64_t global_blocks,
                         int64_t num_blocks, int64_t random_blocks, std::vector<int32_t> random,
                         bool causal, int64_t term) {
    require(block > 0, "term ", term, ": bigbird block must be > 0, got ", block);
    require(window_blocks > 0, "term ", term, ": bigbird window_blocks must be > 0, got ",
            window_blocks);
    require(global_blocks >= 0, "term ", term, ": bigbird global_blocks must be >= 0, got ",
            global_blocks);
    require(num_blocks >= 0, "term ", term, ": bigbird table_rows must be >= 0, got ", num_blocks);
    require(random_blocks >= 0 && random_blocks <= num_blocks, "term ", term,
            ": bigbird random_blocks must be in [0, ", num_blocks, "], got ", random_blocks);
    for (size_t n = 0; n < random.size(); ++n)
      require(random[n] >= -1 && random[n] < num_blocks, "term ", term, ": bigbird random block ",
              n, " must be in [-1, ", num_blocks, "), got ", random[n]);
    auto tables = std::make_shared<Pattern::Tables>();
    tables->indices = std::move(random);
    const PatternTerm t = detail::bigbird_term(block, window_blocks, global_blocks, num_blocks,
                                               random_blocks, causal, tables->indices);
    return Pattern::single(t, tables);
  }
};

EncodedPattern encode_pattern(const Pattern& pattern) {
  EncodedPattern e;
  TableWriter<int32_t> i32(e.table_i32);
  TableWriter<int64_t> i64(e.table_i64);
  const PositionFrame f = pattern.frame();
  e.code = {kPatternCodeVersion, pattern.num_exprs(), f.on, f.row, f.key, f.q_len, f.k_len};
  for (const PatternExpr& expr : pattern.exprs()) {
    e.code.push_back(static_cast<int64_t>(expr.op));
    e.code.push_back(expr.num_terms);
    for (int32_t n = 0; n < expr.num_terms; ++n) {
      const PatternTerm& t = expr.terms[n];
      int64_t indices_at = -1, offsets_at = -1, tokens_at = -1;
      if (t.kind == TermKind::BigBird) {
        indices_at = i32.put(t.indices, t.table_rows * t.table_width);
      } else if (t.kind == TermKind::Custom) {
        const int64_t rows = t.table_heads * t.table_rows;
        offsets_at = i64.put(t.offsets, rows + 1);
        indices_at = i32.put(t.indices, t.offsets[rows]);
      } else if (t.kind == TermKind::Longformer) {
        tokens_at = i64.put(t.tokens, t.num_tokens);
      }
      const int64_t words[kTermWords] = {static_cast<int64_t>(t.kind),
                                         t.causal,
                                         t.a,
                                         t.b,
                                         t.c,
                                         t.table_rows,
                                         t.table_width,
                                         t.table_heads,
                                         t.num_tokens,
                                         indices_at,
                                         offsets_at,
                                         tokens_at};
      e.code.insert(e.code.end(), words, words + kTermWords);
    }
  }
  return e;
}

namespace {

struct TableArrays {
  const int32_t* i32;
  int64_t i32_size;
  const int64_t* i64;
  int64_t i64_size;
};

// One term as a single-term Pattern, through its builder.
Pattern decode_term(const int64_t* w, const TableArrays& tables, int64_t term) {
  require_flag(w[kCausal], "causal", term);
  const bool causal = w[kCausal] != 0;
  const int64_t kind = w[kKind];
  auto require_causal = [&](const char* name) {
    require(causal, "term ", term, ": ", name, " terms are always causal, got causal=0");
  };
  switch (kind) {
    case static_cast<int64_t>(TermKind::Dense): return Pattern::dense(causal);
    case static_cast<int64_t>(TermKind::BlockDiagonal): return Pattern::block_diagonal(w[kA], causal);
    case static_cast<int64_t>(TermKind::SlidingWindow):
      return Pattern::sliding_window(w[kA], w[kB], causal);
    case static_cast<int64_t>(TermKind::Streaming):
      require_causal("streaming");
      return Pattern::streaming(w[kA], w[kB]);
    case static_cast<int64_t>(TermKind::Strided):
      require_causal("strided");
      return Pattern::strided(w[kA]);
    case static_cast<int64_t>(TermKind::Fixed):
      require_causal("fixed");
      return Pattern::fixed(w[kA], w[kB]);
    case static_cast<int64_t>(TermKind::Dilated): return Pattern::dilated({w[kA]}, {w[kB]}, causal);
    case static_cast<int64_t>(TermKind::BigBird): {
      const int64_t rows = w[kTableRows], width = w[kTableWidth];
      require(rows >= 0 && width >= 0 && (width == 0 || rows <= std::numeric_limits<int64_t>::max() / width),
              "term ", term, ": bigbird table ", rows, " x ", width, " is not a valid size");
      std::vector<int32_t> random = table_slice(tables.i32, tables.i32_size, w[kIndicesAt],
                                                rows * width, "table_i32", "bigbird random blocks", term);
      return detail::PatternDecoder::bigbird(w[kA], w[kB], w[kC], rows, width, std::move(random),
                                             causal, term);
    }
    case static_cast<int64_t>(TermKind::Longformer): {
      std::vector<int64_t> tokens = table_slice(tables.i64, tables.i64_size, w[kTokensAt],
                                                w[kNumTokens], "table_i64", "longformer tokens", term);
      return Pattern::longformer(w[kA], std::move(tokens), causal);
    }
    case static_cast<int64_t>(TermKind::Custom): {
      const int64_t heads = w[kTableHeads], rows = w[kTableRows];
      require(heads > 0 && rows >= 0 && rows <= std::numeric_limits<int64_t>::max() / heads - 1,
              "term ", term, ": custom table_heads (", heads, ") must be > 0 and table_rows (", rows,
              ") >= 0, both small enough to index");
      std::vector<int64_t> offsets = table_slice(tables.i64, tables.i64_size, w[kOffsetsAt],
                                                 heads * rows + 1, "table_i64", "custom offsets", term);
      std::vector<int32_t> indices = table_slice(tables.i32, tables.i32_size, w[kIndicesAt],
                                                 offsets.back(), "table_i32", "custom indices", term);
      return Pattern::custom_bsr(std::move(offsets), std::move(indices), heads, rows,
                                 w[kTableWidth], w[kA], w[kB], causal);
    }
    default: break;
  }
  fail("term ", term, ": kind must be in [0, ", static_cast<int64_t>(TermKind::Custom), "], got ",
       kind);
}

}  // namespace

Pattern decode_pattern(const int64_t* code, int64_t code_size, const int32_t* table_i32,
                       int64_t table_i32_size, const int64_t* table_i64, int64_t table_i64_size) {
  require(code != nullptr && code_size >= kHeaderWords, "pattern code must hold at least ",
          kHeaderWords, " words, got ", code_size);
  require(code[0] == kPatternCodeVersion, "pattern code version must be ", kPatternCodeVersion,
          ", got ", code[0]);
  const int64_t num_exprs = code[1];
  require(num_exprs >= 1 && num_exprs <= (code_size - kHeaderWords) / kExprWords,
          "pattern code: expression count must be in [1, ", (code_size - kHeaderWords) / kExprWords,
          "] for ", code_size, " words, got ", num_exprs);
  const TableArrays tables{table_i32, table_i32_size, table_i64, table_i64_size};
  std::vector<Pattern> exprs;
  int64_t at = kHeaderWords, term = 0;
  for (int64_t x = 0; x < num_exprs; ++x) {
    require(code_size - at >= kExprWords, "pattern code ends inside expression ", x, " (", code_size,
            " words)");
    const int64_t op = code[at], num_terms = code[at + 1];
    require(op == static_cast<int64_t>(ExprOp::Or) || op == static_cast<int64_t>(ExprOp::And),
            "expression ", x, ": op must be 0 (or) or 1 (and), got ", op);
    require(num_terms >= 1 && num_terms <= kMaxTerms, "expression ", x, ": term count must be in [1, ",
            kMaxTerms, "], got ", num_terms);
    at += kExprWords;
    require((code_size - at) / kTermWords >= num_terms, "pattern code ends inside expression ", x,
            " (", code_size, " words)");
    Pattern expr = decode_term(code + at, tables, term++);
    for (int64_t n = 1; n < num_terms; ++n) {
      const Pattern next = decode_term(code + at + n * kTermWords, tables, term++);
      expr = op == static_cast<int64_t>(ExprOp::Or) ? Pattern::unite(expr, next)
                                                    : Pattern::intersect(expr, next);
    }
    at += num_terms * kTermWords;
    exprs.push_back(std::move(expr));
  }
  require(at == code_size, "pattern code has ", code_size - at, " words after its last expression");
  Pattern pattern = num_exprs == 1 ? exprs.front() : Pattern::per_head(exprs);
  require(code[2] == 0 || code[2] == 1, "pattern code: the frame's flag must be 0 or 1, got ", code[2]);
  if (code[2] == 0) {
    require(code[3] == 0 && code[4] == 0 && code[5] == 0 && code[6] == 0,
            "pattern code: an unframed pattern's frame words must be 0");
    return pattern;
  }
  return pattern.framed(code[3], code[4], code[5], code[6]);
}

}  // namespace spattn
