// cuda/common/tile_walk.cuh - the order in which a CTA visits key tiles: the
// device side of the block iterator.
//
// A CTA owns a work item: a (mask head, query tile) row of the tile plan or a
// piece of one. It walks those kept blocks of the row (entries of the
// BlockMaskView arrays) in ascending key order; each block
// covers block_k / tile_cols consecutive key tiles (one for derived plans), the
// last of which may lie past the end of the keys (of the mask, or of a shorter
// varlen sequence) and ends the walk.
#pragma once

#include <cstdint>

#include "cuda/plan/device_plan_view.hpp"

namespace spattn::cuda_detail {

// `value` of lane 0 in every lane, for values the same in every lane anyway
// (what a warp reads of the plan at one position): the broadcast tells the
// compiler they are warp-uniform, so that it can keep them and their
// branches out of the per-lane divergence handling.
template <typename V>
__device__ __forceinline__ V warp_uniform(V value) {
  return __shfl_sync(0xffffffffu, value, 0);
}

struct TileWalk {
  int64_t at = 0;   // entry of the row in kv_indices
  int64_t end = 0;  // one past the row's last entry
  int32_t sub = 0;  // key tile inside the block

  // Entries [begin, end) of one row of the walked arrays (a work item).
  __device__ __forceinline__ static TileWalk entries(int64_t begin, int64_t end) {
    TileWalk w;
    w.at = begin;
    w.end = end;
    return w;
  }

  __device__ __forceinline__ int64_t key_tile(const DeviceTilePlanView& plan, int64_t tiles_per_block) const {
    return static_cast<int64_t>(plan.blocks.kv_indices[at]) * tiles_per_block + sub;
  }

  __device__ __forceinline__ bool valid(const DeviceTilePlanView& plan, int64_t tiles_per_block) const {
    return at < end && key_tile(plan, tiles_per_block) < plan.num_k_tiles;
  }

  // valid(), and the tile (of `tile_cols` keys) starts below key `key_end`:
  // the end of a varlen sequence shorter than the mask. The sm80 kernel
  // steers by this form, which reads the index twice: written as
  // key_tile_or_end(...) >= 0, it ran 1.0-1.7% slower on every case measured
  // in one A/B run on an H200.
  __device__ __forceinline__ bool valid(const DeviceTilePlanView& plan, int64_t tiles_per_block, int64_t tile_cols,
                                        int64_t key_end) const {
    return valid(plan, tiles_per_block) && key_tile(plan, tiles_per_block) * tile_cols < key_end;
  }

  // The key tile at the walk's position, or -1 where valid() is false, with
  // the index read once (what the sm90 consumers steer by).
  __device__ __forceinline__ int64_t key_tile_or_end(const DeviceTilePlanView& plan, int64_t tiles_per_block,
                                                     int64_t tile_cols, int64_t key_end) const {
    if (at >= end) return -1;
    const int64_t tile = key_tile(plan, tiles_per_block);
    return tile < plan.num_k_tiles && tile * tile_cols < key_end ? tile : -1;
  }

  // key_tile_or_end and whether the block is full, both read at once (two
  // loads in flight together rather than one after the other).
  struct Peek {
    int64_t key_tile;  // -1 past the end
    bool full;
  };
  __device__ __forceinline__ Peek peek(const DeviceTilePlanView& plan, int64_t tiles_per_block, int64_t tile_cols,
                                       int64_t key_end) const {
    if (at >= end) return {-1, false};
    return {key_tile_or_end(plan, tiles_per_block, tile_cols, key_end), full(plan)};
  }

  __device__ __forceinline__ void advance(int64_t tiles_per_block) {
    if (++sub == tiles_per_block) {
      sub = 0;
      ++at;
    }
  }

  __device__ __forceinline__ bool full(const DeviceTilePlanView& plan) const {
    return plan.blocks.kv_full[at] != 0;
  }
};

}  // namespace spattn::cuda_detail
