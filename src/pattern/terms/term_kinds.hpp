// pattern/terms/term_kinds.hpp - every pattern kind, and the one switch over
// TermKind (SPATTN_SWITCH_TERM_KIND) through which the library reaches them.
//
// Each kind is a struct in spattn::terms, in its own file, holding the forms
// the library derives from a term of that kind (their shapes are in
// term_forms.hpp):
//
//   allows(t, h, i, p, j)            the predicate: may row i (position p) of
//                                    head h attend to key j?
//   count_row(t, h, i, p, j0, j1)    how many keys of [j0, j1] it allows
//   classify_block(t, h, r, causal)  rectangle r empty, partial or full in
//                                    closed form, or Unknown where it has none
//   key_intervals(t, h, i0, i1, p0, p1, k_len, out)
//                                    keys that can hold a block of rows'
//                                    allowed keys (host)
//   lane_bits(t, h, lanes, j)        the lanes of a CPU tile that see key j
//                                    (host)
//
// and where the kind has them:
//
//   row_word(t, h, i, k0)            custom blocks: the row's keys among 64
//                                    (GPU row words; the other kinds' rows
//                                    are spans, cuda/common/row_key_bits.hpp)
//   lanes_allowing_every_key(t, lanes)  Longformer: the tile's global
//                                    queries, found once per tile (host)
//
// The causal flag (j <= p) is applied by the callers (term_allows,
// term_count_row, term_row_word, term_key_intervals, tile_allowed_bits) to
// every form but classify_block, which decides with it (read once, passed
// in). count_row takes j0 and j1 by reference: so the device mask builder
// compiles to the same code as with the switch this file replaced.
#pragma once

#include "pattern/terms/bigbird.hpp"
#include "pattern/terms/block_diagonal.hpp"
#include "pattern/terms/custom.hpp"
#include "pattern/terms/dense.hpp"
#include "pattern/terms/dilated.hpp"
#include "pattern/terms/fixed.hpp"
#include "pattern/terms/longformer.hpp"
#include "pattern/terms/sliding_window.hpp"
#include "pattern/terms/streaming.hpp"
#include "pattern/terms/strided.hpp"
#include "spattn/hd.hpp"
#include "spattn/pattern_expr.hpp"

// The switch over TermKind: runs the statements after `on_unknown` with
// `Kind` naming the struct of `kind`, or `on_unknown` for a kind out of range.
// A statement, not a function, so that a form may leave its function from a
// case as a switch written out there would (the GPU kernels compile to the
// same code as with one).
#define SPATTN_SWITCH_TERM_KIND(kind, Kind, on_unknown, ...)              \
  switch (kind) {                                                         \
    SPATTN_TERM_KIND_CASE(Dense, Kind, __VA_ARGS__)                       \
    SPATTN_TERM_KIND_CASE(BlockDiagonal, Kind, __VA_ARGS__)               \
    SPATTN_TERM_KIND_CASE(SlidingWindow, Kind, __VA_ARGS__)               \
    SPATTN_TERM_KIND_CASE(Streaming, Kind, __VA_ARGS__)                   \
    SPATTN_TERM_KIND_CASE(Strided, Kind, __VA_ARGS__)                     \
    SPATTN_TERM_KIND_CASE(Fixed, Kind, __VA_ARGS__)                       \
    SPATTN_TERM_KIND_CASE(Dilated, Kind, __VA_ARGS__)                     \
    SPATTN_TERM_KIND_CASE(BigBird, Kind, __VA_ARGS__)                     \
    SPATTN_TERM_KIND_CASE(Longformer, Kind, __VA_ARGS__)                  \
    SPATTN_TERM_KIND_CASE(Custom, Kind, __VA_ARGS__)                      \
    default: {                                                            \
      on_unknown                                                          \
    }                                                                     \
  }

#define SPATTN_TERM_KIND_CASE(Name, Kind, ...) \
  case ::spattn::TermKind::Name: {             \
    using Kind = ::spattn::terms::Name;        \
    __VA_ARGS__                                \
  } break;
