// cuda/bwd_sm80/bwd_walk.hpp - the order in which the backward kernels visit
// tiles: the device side of the block iterator, in both directions (plain
// host/device code; the tests walk it on the host).
//
// ColumnWalk (dK/dV kernel): for each query head of the CTA's kv head in
// turn, the entries of the key-major column (mask head of that query head,
// the key tile's block), ascending in query block, each block expanding into
// its query tiles that hold rows. RowWalk (dQ kernel): the entries of the
// query-major row (mask head, the query tile's block), ascending in key
// block, each expanding into its key tiles; a tile past the keys can only be
// in the last block and ends the walk. Both orders are fixed by the plan,
// so every gradient sum is taken in the same order on every run.
#pragma once

#include <cstdint>

#include "cuda/bwd_sm80/bwd_params.hpp"
#include "cuda/bwd_sm80/bwd_tile_rule.hpp"
#include "spattn/hd.hpp"

namespace spattn::cuda_detail {

struct ColumnWalk {
  int32_t h = 0, h_end = 0;  // the query head walked; one past the kv head's last
  int32_t sub = 0;           // query tile inside the entry's block
  int64_t col_block = 0;     // the key tile's block in the walked lists
  int64_t at = 0, end = 0;   // entry of head h's column; one past its last

  // The walk of key tile kt over query heads [h_first, h_end) (mask head of
  // h: h / per_mask_head), at its first tile.
  SPATTN_HD static ColumnWalk start(const BwdPlanView& plan, int32_t per_mask_head, int32_t h_first, int32_t h_end,
                                    int64_t kt) {
    ColumnWalk w;
    w.h = h_first;
    w.h_end = h_end;
    w.col_block = kt / plan.k_tiles_per_block;
    w.open_column(plan, per_mask_head);
    w.skip_empty_columns(plan, per_mask_head);
    return w;
  }

  SPATTN_HD bool valid() const { return h < h_end; }

  SPATTN_HD int64_t q_tile(const BwdPlanView& plan) const {
    return static_cast<int64_t>(plan.q_indices[at]) * plan.q_tiles_per_block + sub;
  }

  // The tile at the walk's position (key tile kt), with its flags and sub-block bits.
  SPATTN_HD BwdTile tile(const BwdPlanView& plan, int64_t kt) const {
    BwdTile t;
    t.q0 = q_tile(plan) * kBwdTileSide;
    t.k0 = kt * kBwdTileSide;
    t.full = plan.q_full[at] != 0;
    if (plan.sub_present != nullptr) {
      const int64_t forward = plan.q_forward[at];
      t.sub_present = plan.sub_present[forward];
      t.sub_full = plan.sub_full[forward];
    }
    return t;
  }

  // The next tile holding query rows: the block's next tile, else the
  // column's next entry, else the next head's column.
  SPATTN_HD void advance(const BwdPlanView& plan, int32_t per_mask_head) {
    ++sub;
    if (sub == plan.q_tiles_per_block || q_tile(plan) >= plan.num_q_tiles) {
      sub = 0;
      ++at;
    }
    skip_empty_columns(plan, per_mask_head);
  }

 private:
  SPATTN_HD void open_column(const BwdPlanView& plan, int32_t per_mask_head) {
    const int64_t c = static_cast<int64_t>(h / per_mask_head) * plan.num_k_blocks + col_block;
    at = plan.col_offsets[c];
    end = plan.col_offsets[c + 1];
  }
  SPATTN_HD void skip_empty_columns(const BwdPlanView& plan, int32_t per_mask_head) {
    while (at == end && ++h < h_end) open_column(plan, per_mask_head);
  }
};

struct RowWalk {
  int64_t at = 0, end = 0;  // entry of the row; one past its last
  int64_t sub = 0;          // key tile inside the entry's block

  // The walk of query tile qt of mask head mh, at its first tile.
  SPATTN_HD static RowWalk start(const BwdPlanView& plan, int64_t mh, int64_t qt) {
    RowWalk w;
    const int64_t r = mh * plan.num_q_blocks + qt / plan.q_tiles_per_block;
    w.at = plan.row_offsets[r];
    w.end = plan.row_offsets[r + 1];
    return w;
  }

  SPATTN_HD int64_t k_tile(const BwdPlanView& plan) const {
    return static_cast<int64_t>(plan.kv_indices[at]) * plan.k_tiles_per_block + sub;
  }

  SPATTN_HD bool valid(const BwdPlanView& plan) const {
    return at < end && k_tile(plan) < plan.num_k_tiles;
  }

  SPATTN_HD BwdTile tile(const BwdPlanView& plan, int64_t qt) const {
    BwdTile t;
    t.q0 = qt * kBwdTileSide;
    t.k0 = k_tile(plan) * kBwdTileSide;
    t.full = plan.kv_full[at] != 0;
    if (plan.sub_present != nullptr) {
      t.sub_present = plan.sub_present[at];
      t.sub_full = plan.sub_full[at];
    }
    return t;
  }

  SPATTN_HD void advance(const BwdPlanView& plan) {
    if (++sub == plan.k_tiles_per_block) {
      sub = 0;
      ++at;
    }
  }
};

}  // namespace spattn::cuda_detail
