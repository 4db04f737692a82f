// cuda/plan/device_plan_view.hpp - what a kernel receives about the mask: plain
// structs of device pointers, passed by value as kernel arguments.
//
// DeviceMaskView is the BlockMask itself on the device plus the pattern's
// per-head expressions (tables rewritten to device copies). DeviceTilePlanView
// is the tile plan of tile_plan.hpp on the device. Both are views: the memory
// belongs to the call's plan (cuda_plan.hpp) and the mask's device copy
// (device_mask_copy.hpp).
#pragma once

#include <cstdint>

#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

struct DeviceMaskView {
  BlockMaskView blocks;               // device pointers
  const PatternExpr* exprs = nullptr;  // num_exprs entries; null when no block is partial
  int64_t num_exprs = 0;

  // The expression of query head h out of `query_heads` (Pattern::expr_for_head).
  SPATTN_HD const PatternExpr* expr_for_head(int64_t h, int64_t query_heads) const {
    return num_exprs == 1 ? exprs : exprs + h / (query_heads / num_exprs);
  }
};

struct DeviceTilePlanView {
  // The walked arrays: the mask's own (block sizes multiples of the tile) or the
  // derived ones (block sizes equal to the tile).
  BlockMaskView blocks;
  const uint64_t* sub_present = nullptr;  // null when the mask is walked directly
  const uint64_t* sub_full = nullptr;
  SubBlockGrid sub;
  // Per walked entry, its place among the partial ones (-1: full;
  // partial_entry_slots), the partial entries and all entries.
  const int32_t* partial_slots = nullptr;
  int64_t num_partial_entries = 0;
  int64_t num_entries = 0;
  const WorkItem* items = nullptr;  // most work first
  int64_t num_items = 0;
  const int32_t* band_first = nullptr;  // num_bands + 1 entries (tile_plan.hpp); null: one band
  int64_t num_bands = 0;
  int64_t max_item_entries = 0;    // the longest item's plan entries (0: unknown, items built on the device)
  int64_t min_item_entries = 0;    // the shortest item's plan entries (0 also where unknown)
  int64_t total_item_entries = 0;  // all items' plan entries
  const SplitRow* split_rows = nullptr;
  int64_t num_split_rows = 0;
  int64_t num_slots = 0;  // partial-result slots of split rows
  int64_t num_q_tiles = 0;
  int64_t num_k_tiles = 0;
  int64_t tile_rows = 0;  // query rows per kernel tile the plan was made for
  int64_t tile_cols = 0;  // keys per kernel tile the plan was made for
};

}  // namespace spattn::cuda_detail
