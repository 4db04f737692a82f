// partial_bits.cpp - lane masks of partial chunks, term by term.
//
// For key j, every term kind allows a set of query positions p that is an
// interval, a union of a few intervals (BigBird and custom blocks, one per
// query block the tile touches) or a residue class inside an interval
// (strided, dilated). Each set is turned into bits of the tile's lanes (lane i
// is position row0 + shift + i); terms combine with | or & as the expression
// says, and the causal flag intersects with p >= j. The result equals
// expr_allows pair by pair (tests/cpp/test_cpu_backend.cpp checks it).
#include "cpu/fast/partial_bits.hpp"

namespace spattn::cpu_fast {
namespace {

using pattern_math::floor_div;

constexpr int64_t kBelow = -(int64_t{1} << 61);
constexpr int64_t kAbove = int64_t{1} << 61;

int64_t floor_mod(int64_t x, int64_t m) { return x - floor_div(x, m) * m; }

// The tile's lanes as query positions p0 .. p0 + rows - 1.
struct Lanes {
  int64_t p0 = 0;
  int64_t rows = 0;

  uint64_t all() const { return rows == 64 ? ~uint64_t{0} : (uint64_t{1} << rows) - 1; }

  // Lanes whose position lies in [lo, hi].
  uint64_t interval(int64_t lo, int64_t hi) const {
    const int64_t a = lo - p0 > 0 ? lo - p0 : 0;
    const int64_t b = hi - p0 < rows - 1 ? hi - p0 : rows - 1;
    if (a > b) return 0;
    const int64_t n = b - a + 1;
    return (n == 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1) << a;
  }

  // Lanes whose position lies in [lo, hi] and is congruent to residue mod step.
  uint64_t stepped(int64_t lo, int64_t hi, int64_t step, int64_t residue) const {
    if (lo < p0) lo = p0;
    if (hi > p0 + rows - 1) hi = p0 + rows - 1;
    uint64_t bits = 0;
    for (int64_t p = lo + floor_mod(residue - lo, step); p <= hi; p += step)
      bits |= uint64_t{1} << (p - p0);
    return bits;
  }
};

// Lanes whose position is a Longformer global token (independent of the key).
uint64_t global_rows(const PatternTerm& t, const Lanes& lanes) {
  uint64_t bits = 0;
  for (int64_t at = pattern_math::lower_bound(t.tokens, t.num_tokens, lanes.p0);
       at < t.num_tokens && t.tokens[at] < lanes.p0 + lanes.rows; ++at)
    bits |= uint64_t{1} << (t.tokens[at] - lanes.p0);
  return bits;
}

uint64_t term_bits(const PatternTerm& t, int64_t head, const Lanes& lanes, int64_t shift,
                   int64_t j, uint64_t global) {
  uint64_t bits = 0;
  switch (t.kind) {
    case TermKind::Dense: bits = lanes.all(); break;
    case TermKind::BlockDiagonal: {
      const int64_t s = floor_div(j, t.a) * t.a;
      bits = lanes.interval(s, s + t.a - 1);
      break;
    }
    case TermKind::SlidingWindow: bits = lanes.interval(j - t.b, j + t.a); break;
    case TermKind::Streaming: bits = j < t.a ? lanes.all() : lanes.interval(kBelow, j + t.b - 1); break;
    case TermKind::Strided:
      bits = lanes.interval(kBelow, j + t.a - 1) | lanes.stepped(j + t.a, kAbove, t.a, j);
      break;
    case TermKind::Fixed: {
      const int64_t s = floor_div(j, t.a) * t.a;
      bits = lanes.interval(s, s + t.a - 1) | (j % t.a >= t.a - t.b ? lanes.all() : 0);
      break;
    }
    case TermKind::Dilated: {
      const int64_t rate = t.b, residue = head % rate;
      if (j % rate == residue) {
        const int64_t s = floor_div(j, t.a) * t.a;
        bits = lanes.stepped(s, s + t.a - 1, rate, residue);
      }
      break;
    }
    case TermKind::BigBird: {
      const int64_t kb = j / t.a;
      const int64_t qb_last = floor_div(lanes.p0 + lanes.rows - 1, t.a);
      for (int64_t qb = floor_div(lanes.p0, t.a); qb <= qb_last; ++qb)
        if (bigbird_blocks_connected(t, qb, kb)) bits |= lanes.interval(qb * t.a, qb * t.a + t.a - 1);
      break;
    }
    case TermKind::Longformer:
      bits = longformer_is_global(t, j) ? lanes.all()
                                        : lanes.interval(j - t.a / 2, j + t.a / 2) | global;
      break;
    case TermKind::Custom: {
      // Block rows live on the row-index grid: i = p - shift.
      const int64_t i0 = lanes.p0 - shift, kb = j / t.b;
      const int64_t rb_last = (i0 + lanes.rows - 1) / t.a;
      for (int64_t rb = i0 / t.a; rb <= rb_last; ++rb)
        if (custom_block_kept(t, head, rb, kb))
          bits |= lanes.interval(rb * t.a + shift, rb * t.a + t.a - 1 + shift);
      break;
    }
  }
  if (t.causal) bits &= lanes.interval(j, kAbove);
  return bits;
}

}  // namespace

void tile_allowed_bits(const void* context, int64_t first, int64_t count, uint64_t* bits) {
  const TileMaskContext& ctx = *static_cast<const TileMaskContext*>(context);
  const PatternExpr& e = *ctx.expr;
  const Lanes lanes{ctx.row0 + ctx.shift, ctx.rows};
  uint64_t global[kMaxTerms] = {};
  for (int32_t n = 0; n < e.num_terms; ++n)
    if (e.terms[n].kind == TermKind::Longformer) global[n] = global_rows(e.terms[n], lanes);
  const bool all_of = e.op == ExprOp::And;
  for (int64_t j = 0; j < count; ++j) {
    uint64_t allowed = all_of ? lanes.all() : 0;
    for (int32_t n = 0; n < e.num_terms; ++n) {
      const uint64_t term = term_bits(e.terms[n], ctx.head, lanes, ctx.shift, first + j, global[n]);
      allowed = all_of ? allowed & term : allowed | term;
    }
    bits[j] = allowed;
  }
}

}  // namespace spattn::cpu_fast
