// partial_bits.cpp - lane masks of partial chunks, term by term.
//
// For key j, every term kind allows a set of query positions p that is an
// interval, a union of a few intervals (BigBird and custom blocks, one per
// query block the tile touches) or a residue class inside an interval
// (strided, dilated): lane_bits of the kind's file (pattern/terms/<kind>.hpp)
// turns it into bits of the tile's lanes (lane i is position row0 + shift + i),
// together with the lanes that see every key (Longformer's global queries,
// found once per tile). Terms combine with | or & as the expression says, and
// the causal flag intersects with p >= j. The result equals expr_allows pair
// by pair (tests/cpp/test_pattern_kinds.cpp checks it).
#include "cpu/fast/partial_bits.hpp"

#include <type_traits>

#include "pattern/terms/term_kinds.hpp"

namespace spattn::cpu_fast {
namespace {

template <typename Kind, typename = void>
struct HasLanesAllowingEveryKey : std::false_type {};
template <typename Kind>
struct HasLanesAllowingEveryKey<Kind, std::void_t<decltype(&Kind::lanes_allowing_every_key)>> : std::true_type {};

// Kind::lanes_allowing_every_key where the kind has it, else none.
template <typename Kind>
uint64_t lanes_allowing_every_key(const PatternTerm& t, const TileLanes& lanes) {
  if constexpr (HasLanesAllowingEveryKey<Kind>::value) return Kind::lanes_allowing_every_key(t, lanes);
  return 0;
}

}  // namespace

void tile_allowed_bits(const void* context, int64_t first, int64_t count, uint64_t* bits) {
  const TileMaskContext& ctx = *static_cast<const TileMaskContext*>(context);
  const PatternExpr& e = *ctx.expr;
  // Lanes and keys in the pattern's own coordinates (the expression's frame).
  const PositionFrame& f = e.frame;
  const int64_t first_position = framed_position(f, ctx.row0, ctx.row0 + ctx.shift);
  const TileLanes lanes{first_position, ctx.rows, first_position - framed_row(f, ctx.row0)};
  uint64_t every_key[kMaxTerms] = {};
  for (int32_t n = 0; n < e.num_terms; ++n)
    SPATTN_SWITCH_TERM_KIND(e.terms[n].kind, Kind, , every_key[n] = lanes_allowing_every_key<Kind>(e.terms[n], lanes);)
  const bool all_of = e.op == ExprOp::And;
  for (int64_t call_j = first; call_j < first + count; ++call_j) {
    const int64_t j = framed_key(f, call_j);
    uint64_t allowed = all_of ? lanes.all() : 0;
    for (int32_t n = 0; n < e.num_terms; ++n) {
      const PatternTerm& t = e.terms[n];
      uint64_t term = every_key[n];
      SPATTN_SWITCH_TERM_KIND(t.kind, Kind, , term |= Kind::lane_bits(t, ctx.head, lanes, j);)
      if (t.causal) term &= lanes.at_least(j);
      allowed = all_of ? allowed & term : allowed | term;
    }
    bits[call_j - first] = allowed;
  }
}

}  // namespace spattn::cpu_fast
