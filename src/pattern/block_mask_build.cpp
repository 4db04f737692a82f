// block_mask_build.cpp - turning a Pattern into a BlockMask without L x L work.
//
// For each (mask head, query block) every term names the key intervals that
// can hold allowed keys (a superset: windows, sinks, segments, periodic
// columns, random blocks, ...; key_intervals of each kind's file,
// pattern/terms/<kind>.hpp). The intervals become candidate key blocks,
// and each candidate is classified exactly by counting allowed keys row by row
// with the closed forms of pattern_terms.hpp: zero everywhere -> dropped, the
// whole block -> full, otherwise partial (the scan stops as soon as a block is
// known to be partial). Time and memory follow the kept blocks; rows are
// independent and built on all cores (OpenMP). Before anything is allocated
// the plan's size is estimated from a sample of rows and checked against the
// memory available (spattn/memory.hpp), and the exact size is checked again
// once the rows are counted.
#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "pattern/block_classify.hpp"
#include "pattern/build_checks.hpp"
#include "pattern/key_intervals.hpp"
#include "pattern/terms/term_kinds.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/error.hpp"
#include "spattn/memory.hpp"

namespace spattn {

void term_key_intervals(const PatternTerm& t, int64_t h, int64_t i0, int64_t i1, int64_t p0,
                        int64_t p1, int64_t k_len, std::vector<KeyInterval>& out) {
  const size_t first = out.size();
  SPATTN_SWITCH_TERM_KIND(t.kind, Kind, , Kind::key_intervals(t, h, i0, i1, p0, p1, k_len, out);)
  for (size_t n = first; n < out.size(); ++n) {
    out[n].lo = std::max<int64_t>(out[n].lo, 0);
    out[n].hi = std::min(out[n].hi, t.causal ? std::min(p1, k_len - 1) : k_len - 1);
  }
}

namespace {

int64_t interval_cover(const std::vector<KeyInterval>& v) {
  int64_t n = 0;
  for (const KeyInterval& iv : v) n += std::max<int64_t>(0, iv.hi - iv.lo + 1);
  return n;
}

// The intervals of the pattern's own rows and keys [0, key_end), as above.
void expr_key_intervals_at(const PatternExpr& e, int64_t h, int64_t i0, int64_t i1, int64_t p0, int64_t p1,
                           int64_t key_end, std::vector<KeyInterval>& out) {
  out.clear();
  if (e.op == ExprOp::Or) {
    for (int32_t n = 0; n < e.num_terms; ++n) term_key_intervals(e.terms[n], h, i0, i1, p0, p1, key_end, out);
    return;
  }
  std::vector<KeyInterval> best, trial;
  int64_t best_cover = std::numeric_limits<int64_t>::max();
  for (int32_t n = 0; n < e.num_terms; ++n) {
    trial.clear();
    term_key_intervals(e.terms[n], h, i0, i1, p0, p1, key_end, trial);
    const int64_t cover = interval_cover(trial);
    if (cover < best_cover) {
      best_cover = cover;
      best.swap(trial);
    }
  }
  out.swap(best);
}

}  // namespace

void expr_key_intervals(const PatternExpr& e, int64_t h, int64_t i0, int64_t i1, int64_t p0,
                        int64_t p1, int64_t k_len, std::vector<KeyInterval>& out) {
  const PositionFrame& f = e.frame;
  expr_key_intervals_at(e, h, framed_row(f, i0), framed_row(f, i1), framed_position(f, i0, p0),
                        framed_position(f, i1, p1), framed_key(f, k_len), out);
  if (f.key == 0) return;
  for (KeyInterval& iv : out) {  // back to the call's keys [0, k_len)
    iv.lo = std::max<int64_t>(iv.lo - f.key, 0);
    iv.hi -= f.key;
  }
}

namespace {

using pattern_math::ceil_div;

// Plans of fewer rows are built on one thread.
constexpr int64_t kMinParallelRows = 64;

// Appends the kept blocks of one (head, query block) row over a range of key
// blocks, in order. A range whose whole rectangle the closed forms call full
// (or empty) is full (or empty) block by block too, so it is written in one
// go; otherwise it is halved, down to single blocks classified exactly. Rows
// cost O(boundaries x log blocks) classifications, not one per block.
// Where the emitted blocks go: counted only (indices == nullptr), or written
// from the row's first slot on.
struct PlanOutput {
  int32_t* indices = nullptr;
  uint8_t* full = nullptr;
  int64_t count = 0;
};

struct RowEmitter {
  const PatternExpr& e;
  int64_t h, i0, i1, offset, block_k, k_len;
  PlanOutput& out;

  void emit(int64_t kb_first, int64_t kb_last) {
    const int64_t j0 = kb_first * block_k, j1 = std::min(k_len, (kb_last + 1) * block_k) - 1;
    if (kb_first == kb_last) {
      const BlockClass c = expr_classify_block_exact(e, h, i0, i1, offset, j0, j1);
      if (c != BlockClass::Empty) append(kb_first, kb_last, c == BlockClass::Full);
      return;
    }
    const BlockClass c = expr_classify_block(e, h, BlockRect{i0, i1, i0 + offset, i1 + offset, j0, j1});
    if (c == BlockClass::Empty) return;
    if (c == BlockClass::Full) {
      append(kb_first, kb_last, true);
      return;
    }
    const int64_t middle = kb_first + (kb_last - kb_first) / 2;
    emit(kb_first, middle);
    emit(middle + 1, kb_last);
  }

  void append(int64_t kb_first, int64_t kb_last, bool is_full) {
    const int64_t count = kb_last - kb_first + 1;
    if (out.indices) {
      std::iota(out.indices + out.count, out.indices + out.count + count, static_cast<int32_t>(kb_first));
      std::fill(out.full + out.count, out.full + out.count + count, is_full ? uint8_t{1} : uint8_t{0});
    }
    out.count += count;
  }
};

}  // namespace

void check_build_args(const Pattern& pattern, const MaskShape& s) {
  require(s.q_len >= 0, "q_len must be >= 0, got ", s.q_len);
  require(s.k_len >= 0, "k_len must be >= 0, got ", s.k_len);
  require(s.block_q > 0, "block_q must be > 0, got ", s.block_q);
  require(s.block_k > 0, "block_k must be > 0, got ", s.block_k);
  require(s.num_heads > 0, "num_heads must be > 0, got ", s.num_heads);
  constexpr int64_t kMaxTotalLength = int64_t{1} << 62;  // keeps every p +- extent inside int64
  require(s.q_len <= kMaxTotalLength - s.k_len, "q_len + k_len must be <= 2^62, got q_len=", s.q_len,
          " k_len=", s.k_len);
  require(s.num_heads % pattern.num_exprs() == 0, "num_heads (", s.num_heads,
          ") must be a multiple of the pattern's per-head count (", pattern.num_exprs(), ")");
  pattern.check_lengths(s.q_len, s.k_len);
  for (const PatternExpr& e : pattern.exprs())
    for (int32_t n = 0; n < e.num_terms; ++n)
      require(e.terms[n].kind != TermKind::Custom || e.terms[n].table_heads == 1 ||
                  e.terms[n].table_heads == s.num_heads,
              "the custom mask has ", e.terms[n].table_heads, " heads but num_heads=", s.num_heads);
  const int64_t nkb = ceil_div(s.k_len, s.block_k);
  require(nkb <= std::numeric_limits<int32_t>::max(), "the number of key blocks must fit in 32 bits",
          ", got ", nkb, " (k_len=", s.k_len, ", block_k=", s.block_k, ")");
}

int64_t plan_mask_heads(const Pattern& pattern, const MaskShape& s) {
  return pattern.head_dependent() ? s.num_heads : 1;
}

namespace {

// Walks row r (mask head r / nqb, query block r % nqb) over its candidate key
// blocks; `intervals` is scratch.
struct RowWalker {
  const Pattern& pattern;
  const MaskShape& s;
  int64_t nqb, offset;

  void walk(int64_t r, std::vector<KeyInterval>& intervals, PlanOutput& out) const {
    const int64_t h = r / nqb, qb = r % nqb;
    const PatternExpr& e = pattern.expr_for_head(h, s.num_heads);
    const int64_t i0 = qb * s.block_q, i1 = std::min(s.q_len, i0 + s.block_q) - 1;
    expr_key_intervals(e, h, i0, i1, i0 + offset, i1 + offset, s.k_len, intervals);
    std::sort(intervals.begin(), intervals.end(), [](const KeyInterval& a, const KeyInterval& b) { return a.lo < b.lo; });
    RowEmitter row{e, h, i0, i1, offset, s.block_k, s.k_len, out};
    int64_t next_kb = 0;  // blocks below this one were already visited
    for (const KeyInterval& iv : intervals) {
      if (iv.hi < iv.lo || iv.hi / s.block_k < next_kb) continue;
      const int64_t first = std::max(iv.lo / s.block_k, next_kb), last = iv.hi / s.block_k;
      row.emit(first, last);
      next_kb = last + 1;
    }
  }
};

// Rows counted to estimate a plan's size before it is built.
constexpr int64_t kSampledRows = 64;

// Bytes of a plan of `rows` rows and `blocks` kept blocks (offset, index, flag).
int64_t plan_bytes(int64_t rows, int64_t blocks) {
  return add_bytes(bytes_for(rows + 1, sizeof(int64_t)), bytes_for(blocks, sizeof(int32_t) + sizeof(uint8_t)));
}

std::string build_request(const MaskShape& s) {
  std::ostringstream os;
  os << "BlockMask::build(q_len=" << s.q_len << ", k_len=" << s.k_len << ", block_q=" << s.block_q
     << ", block_k=" << s.block_k << ", num_heads=" << s.num_heads << ")";
  return os.str();
}

}  // namespace

int64_t BlockMask::build_bytes(const Pattern& pattern, const MaskShape& s) {
  check_build_args(pattern, s);
  const int64_t nqb = ceil_div(s.q_len, s.block_q);
  const int64_t rows = bytes_for(plan_mask_heads(pattern, s), nqb);  // saturates like a byte count
  const RowWalker walker{pattern, s, nqb, s.k_len - s.q_len};
  // The middle row of each of kSampledRows equal stretches (every row when fewer).
  const int64_t samples = std::min(rows, kSampledRows);
  if (samples == 0) return plan_bytes(0, 0);  // Lq == 0: no rows
  std::vector<KeyInterval> intervals;
  double blocks = 0.0;
  for (int64_t n = 0; n < samples; ++n) {
    const auto r = static_cast<int64_t>((2.0 * static_cast<double>(n) + 1.0) * static_cast<double>(rows) /
                                        (2.0 * static_cast<double>(samples)));
    PlanOutput counted;
    walker.walk(std::min(r, rows - 1), intervals, counted);
    blocks += static_cast<double>(counted.count);
  }
  const double estimate = blocks / static_cast<double>(samples) * static_cast<double>(rows);
  const double limit = static_cast<double>(std::numeric_limits<int64_t>::max());
  return plan_bytes(rows, estimate >= limit ? std::numeric_limits<int64_t>::max()
                                            : static_cast<int64_t>(estimate));
}

BlockMask BlockMask::build(const Pattern& pattern, const MaskShape& s) {
  MemoryEstimate(build_request(s)).add("block mask (estimated)", build_bytes(pattern, s)).check();
  const int64_t nqb = ceil_div(s.q_len, s.block_q);
  const int64_t mask_heads = plan_mask_heads(pattern, s);
  const RowWalker walker{pattern, s, nqb, s.k_len - s.q_len};
  // Rows are independent: counted first, so the arrays are allocated once at
  // their final size, then each written from its offset on, on all cores.
  const int64_t rows = mask_heads * nqb;
  std::vector<int64_t> row_offsets(static_cast<size_t>(rows + 1), 0);
#pragma omp parallel if (rows >= kMinParallelRows)
  {
    std::vector<KeyInterval> intervals;
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      PlanOutput counted;
      walker.walk(r, intervals, counted);
      row_offsets[static_cast<size_t>(r + 1)] = counted.count;
    }
  }
  std::partial_sum(row_offsets.begin(), row_offsets.end(), row_offsets.begin());
  // The estimate sampled rows; the block lists are checked at their exact size.
  MemoryEstimate(build_request(s)).add("block lists", plan_bytes(0, row_offsets.back())).check();
  std::vector<int32_t> indices(static_cast<size_t>(row_offsets.back()));
  std::vector<uint8_t> full(indices.size());
#pragma omp parallel if (rows >= kMinParallelRows)
  {
    std::vector<KeyInterval> intervals;
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      const auto first = static_cast<size_t>(row_offsets[static_cast<size_t>(r)]);
      PlanOutput written{indices.data() + first, full.data() + first, 0};
      walker.walk(r, intervals, written);
    }
  }
  BlockMask mask(BuiltPlan{}, s.q_len, s.k_len, s.block_q, s.block_k, mask_heads,
                 std::move(row_offsets), std::move(indices), std::move(full),
                 std::make_shared<Pattern>(pattern));
  return mask;
}

}  // namespace spattn
