// cuda/plan/dilated_split.hpp - the plan step that runs a dilated term of a
// pattern as dense attention over permuted tokens (DESIGN.md section 3), host
// side (plain C++, no CUDA).
//
// A pattern E = D | E' whose dilated term D (segment w, rate r, w % r == 0)
// covers complete segments is split into two disjoint parts:
//   - the permuted part: D's pairs inside the regular segments (segments lying
//     wholly inside both the query positions and the keys). Query head h sees
//     residue h % r only, so taking the tokens of each (segment, h % r)
//     group in order, as a run of G = w / r tokens, turns D into
//     block-diagonal attention with blocks of G (causal inside a block when D
//     is), all of whose computed blocks are full;
//   - the rest: every other pair of E (E' and D's pairs in the ragged first or
//     last segment), computed by the fused kernel on a mask holding only the
//     blocks that E' keeps or that touch a ragged segment, with D's regular
//     pairs excluded in registers on partial tiles.
// Full tiles stay free of that test: in each regular row of mask blocks the
// longest run of consecutive full blocks stays full and the rest computes
// all of its pairs, D's included ("full runs"); the permuted pass leaves
// those keys out instead. Every other block of the rest is partial. (Runs need
// the kernel to walk the mask's own blocks: block sizes multiples of the
// kernel tile; otherwise there are none.)
// The two (O, LSE) results are merged per row in fp32 (RowMerge,
// cuda/common/row_merge.cuh) in the permuted pass's epilogue, its own O
// rounded to the output type first.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

struct DilatedSplit {
  int64_t segment = 0;        // w
  int64_t rate = 0;           // r
  int64_t group = 0;          // G = w / r tokens per (segment, residue) group
  int32_t causal = 0;         // D carries the causal modifier
  int32_t term = -1;          // D's index in the pattern's expression
  int64_t first_position = 0; // first position of the first regular segment
  int64_t num_segments = 0;   // regular segments
  int64_t query_heads = 0;    // the mask is per query head; calls must match
  BlockMask rest;             // E minus D's regular pairs (pattern E; the kernel excludes them);
                              // one mask head where every head's blocks are alike
  BlockMask permuted;         // block-diagonal(G) over num_segments * G permuted tokens
  // Per (rest mask head, query block): keys [first, end) of its full run
  // (first == end: none).
  std::vector<int32_t> full_runs;
};

// The split of `mask` for a kernel of tile `tile`, or null when its pattern
// has no such dilated term, is per-head, or the mask is not the pattern's
// whole plan (BlockMask::build or cuda_build_mask, is_pattern_plan; a mask
// made from arrays is compared with BlockMask::build).
std::shared_ptr<const DilatedSplit> make_dilated_split(const BlockMask& mask, TileShape tile);

// What each pass leaves to the other (FwdParams::exclude): the rest pass's
// exclusion, and the permuted pass's for a call of q_len queries and k_len
// keys with `runs` the split's full_runs (a device copy for the kernels).
DilatedExclusion rest_exclusion(const DilatedSplit& split);
DilatedExclusion permuted_exclusion(const DilatedSplit& split, int64_t q_len, int64_t k_len, const int32_t* runs);

}  // namespace spattn::cuda_detail
