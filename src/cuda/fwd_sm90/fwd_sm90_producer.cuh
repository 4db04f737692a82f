// cuda/fwd_sm90/fwd_sm90_producer.cuh - the producer thread of the Hopper
// forward kernel (fwd_sm90_kernel.cuh): draws and locates the work units,
// posts them to the unit ring, and loads each unit's kept K and V tiles and
// its Q with the TMA into the pipeline's stages.
#pragma once

#include <cstdint>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_walk.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_pipeline.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"

namespace spattn::cuda_detail {

// Copies rows [row0, row0 + rows) of residue `residue` of one (batch, head)
// slice (tensor_maps.hpp), all panels, to `dst` (panel after panel) and
// completes the bytes on `bar`.
template <typename Tr>
__device__ __forceinline__ void tma_load_tile(uint32_t dst, uint32_t panel_bytes, const CUtensorMap& map,
                                              uint32_t bar, int32_t residue, int64_t row0, int64_t h, int64_t b) {
#pragma unroll
  for (int panel = 0; panel < Tr::kPanels; ++panel)
    tma_load_5d(dst + panel * panel_bytes, &map, bar, panel * Tr::kPanelCols, residue, static_cast<int32_t>(row0),
                static_cast<int32_t>(h), static_cast<int32_t>(b));
}

// The loads of one work unit: K(n) on "K full" and V(n) on "V full" of the
// next free stage of the ring for each kept tile, and Q once, after the
// first K and V; nothing for a unit the consumers skip (consume_unit).
template <typename Tr>
__device__ __forceinline__ void load_unit(const FwdParams& p, const Sm90TensorMaps& maps, const Sm90Smem<Tr>& sm,
                                          int64_t tiles_per_block, const Sm90Work& w, RingSlot<Tr::kStages>& slot,
                                          uint32_t& q_loads) {
  const DeviceTilePlanView& plan = p.plan;
  const SequenceSpan seq = sequence_span(p, w.b);
  const int64_t q0 = w.row0 - seq.mask_row_offset;
  TileWalk walk = TileWalk::entries(w.item.begin, w.item.end);
  if (!seq.tile_has_rows(q0, Tr::kBlockM) || walk.key_tile_or_end(plan, tiles_per_block, Tr::kBlockN, seq.k_len) < 0)
    return;
  const int32_t residue = p.head_residue(w.h);  // of the query head, for Q, K and V
  bool q_loaded = false;
  do {
    const int64_t k_row = seq.k_first + walk.key_tile(plan, tiles_per_block) * Tr::kBlockN;
    mbarrier_wait(sm.k_free(slot.stage), slot.parity ^ 1u);
    mbarrier_arrive_expect_tx(sm.k_full(slot.stage), Tr::kKVBytes);
    tma_load_tile<Tr>(sm.k(slot.stage), Tr::kKVPanelBytes, maps.k, sm.k_full(slot.stage), residue, k_row, w.kv_head,
                      seq.batch);
    mbarrier_wait(sm.v_free(slot.stage), slot.parity ^ 1u);
    mbarrier_arrive_expect_tx(sm.v_full(slot.stage), Tr::kKVBytes);
    tma_load_tile<Tr>(sm.v(slot.stage), Tr::kKVPanelBytes, maps.v, sm.v_full(slot.stage), residue, k_row, w.kv_head,
                      seq.batch);
    // Q after the unit's first K and V: their stage is usually free already,
    // while Q's buffer frees only once the last unit's S products are done,
    // so the first tile's loads overlap the end of the last unit.
    if (!q_loaded) {
      if (q_loads > 0) mbarrier_wait(sm.q_free(), (q_loads - 1) & 1u);
      ++q_loads;
      q_loaded = true;
      mbarrier_arrive_expect_tx(sm.q_full(), Tr::kQBytes);
      tma_load_tile<Tr>(sm.q(), Tr::kQPanelBytes, maps.q, sm.q_full(), residue, seq.q_first + q0, w.h, seq.batch);
    }
    slot.advance();
    walk.advance(tiles_per_block);
  } while (walk.key_tile_or_end(plan, tiles_per_block, Tr::kBlockN, seq.k_len) >= 0);
}

// The producer thread: draws and locates each work unit, posts it to the
// consumers, and loads it. Where the slots carry the plan items
// (Tr::kUnitItemsInSlots) each unit is posted once the loads of the one
// before it are out and read back from its slot, so no unit state stays in
// the producer's few registers across the loads, and the next unit is drawn
// from the counter when a unit starts, its latency passing during the loads.
template <typename Tr>
__device__ __forceinline__ void produce(const FwdParams& p, const Sm90TensorMaps& maps, const Sm90Smem<Tr>& sm,
                                        const WorkUnits& units, uint32_t* unit_counter) {
  const DeviceTilePlanView& plan = p.plan;
  const int64_t tiles_per_block = plan.blocks.block_k / Tr::kBlockN;
  RingSlot<Tr::kStages> slot;
  UnitRing<Tr> ring;
  uint32_t q_loads = 0;
  if constexpr (Tr::kUnitItemsInSlots) {
    uint32_t unit = blockIdx.x;
    ring.post(sm, plan, locate_unit(plan, units, unit));
    for (;;) {
      UnitPlace place;
      WorkItem item;
      ring.last_posted(sm, place, item);
      if (place.item == kNoItem) break;
      unit = unit_counter ? gridDim.x + atomicAdd(unit_counter, 1u) : unit + gridDim.x;
      load_unit<Tr>(p, maps, sm, tiles_per_block, Sm90Work::at(units, place, item, Tr::kBlockM), slot, q_loads);
      ring.post(sm, plan, locate_unit(plan, units, unit));
    }
  } else {
    for (uint32_t unit = blockIdx.x;;
         unit = unit_counter ? gridDim.x + atomicAdd(unit_counter, 1u) : unit + gridDim.x) {
      const UnitPlace place = locate_unit(plan, units, unit);
      ring.post(sm, plan, place);
      if (place.item == kNoItem) break;
      load_unit<Tr>(p, maps, sm, tiles_per_block, Sm90Work::at(units, place, plan.items[place.item], Tr::kBlockM),
                    slot, q_loads);
    }
  }
}

}  // namespace spattn::cuda_detail
