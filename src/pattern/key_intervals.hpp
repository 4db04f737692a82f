// pattern/key_intervals.hpp - the key intervals that can hold the allowed keys
// of a block of query rows, per term (key_intervals of its kind,
// pattern/terms/<kind>.hpp) and per expression: a superset (windows, sinks,
// segments, periodic columns, random blocks, ...), from which the host
// BlockMask builder (block_mask_build.cpp, where these are defined) takes its
// candidate key blocks. Host code.
#pragma once

#include <cstdint>
#include <vector>

#include "pattern/terms/term_forms.hpp"
#include "spattn/pattern_expr.hpp"

namespace spattn {

// Appends intervals covering every key the term may allow for query rows
// [i0, i1] at positions [p0, p1] of head h, clipped to [0, k_len) (and to
// keys <= p1 when causal); an interval may be empty (hi < lo).
void term_key_intervals(const PatternTerm& t, int64_t h, int64_t i0, int64_t i1, int64_t p0, int64_t p1,
                        int64_t k_len, std::vector<KeyInterval>& out);

// Replaces `out` with intervals covering every key the expression may allow
// for those rows: the union of its terms' for OR; for AND, the smallest of its
// terms' (any superset will do). Rows, positions and keys are the call's,
// translated through the expression's frame.
void expr_key_intervals(const PatternExpr& e, int64_t h, int64_t i0, int64_t i1, int64_t p0, int64_t p1,
                        int64_t k_len, std::vector<KeyInterval>& out);

}  // namespace spattn
