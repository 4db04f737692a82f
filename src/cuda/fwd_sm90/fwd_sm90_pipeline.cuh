// cuda/fwd_sm90/fwd_sm90_pipeline.cuh - what the roles of the Hopper forward
// kernel (fwd_sm90_kernel.cuh) share: the launch's schedule, a work unit
// located (Sm90Work), the shared-memory addresses of the pipeline
// (Sm90Smem), ring positions (RingSlot) and the ring of work units handed
// from the producer to the consumers and the output warp (UnitRing).
#pragma once

#include <cstdint>

#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_traits.cuh"
#include "cuda/plan/device_plan_view.hpp"

namespace spattn::cuda_detail {

// What the launch passes beside the parameters: `counter` gives the units
// after each CTA's first (UnitRing; null: a static stride), `order` their
// order.
struct Sm90Schedule {
  uint32_t* counter;
  UnitOrder order;
};

// One work unit of the persistent grid: a plan item for one (batch, head).
struct Sm90Work {
  WorkItem item;
  int64_t copy = 0, b = 0, h = 0, kv_head = 0;
  int64_t row0 = 0;  // the tile's first mask row (its first query row: row0 - SequenceSpan::mask_row_offset)

  __device__ __forceinline__ static Sm90Work at(const WorkUnits& units, UnitPlace place, const WorkItem& item,
                                                int64_t block_m) {
    Sm90Work w;
    w.item = item;
    const uint32_t copy = place.copy, row = static_cast<uint32_t>(w.item.row);
    w.copy = copy;
    w.b = copy / units.heads_per_mask_head;
    const uint32_t h = row / units.q_tiles * units.heads_per_mask_head + copy % units.heads_per_mask_head;
    w.h = h;
    w.kv_head = h / units.q_per_kv;
    w.row0 = static_cast<int64_t>(row % units.q_tiles) * block_m;
    return w;
  }
};

// Shared-memory addresses of the pipeline (layout in fwd_sm90_traits.cuh).
template <typename Tr>
struct Sm90Smem {
  uint32_t base;
  __device__ __forceinline__ uint32_t q() const { return base; }
  __device__ __forceinline__ uint32_t k(int stage) const { return base + Tr::kKOffset + stage * Tr::kKVBytes; }
  __device__ __forceinline__ uint32_t v(int stage) const { return base + Tr::kVOffset + stage * Tr::kKVBytes; }
  __device__ __forceinline__ uint32_t o() const { return base + Tr::kOOffset; }
  __device__ __forceinline__ uint32_t q_full() const { return base + Tr::kBarrierOffset; }
  __device__ __forceinline__ uint32_t q_free() const { return base + Tr::kBarrierOffset + 8; }
  __device__ __forceinline__ uint32_t k_full(int stage) const { return base + Tr::kBarrierOffset + 16 + 8 * stage; }
  __device__ __forceinline__ uint32_t v_full(int stage) const {
    return base + Tr::kBarrierOffset + 16 + 8 * (Tr::kStages + stage);
  }
  __device__ __forceinline__ uint32_t k_free(int stage) const {
    return base + Tr::kBarrierOffset + 16 + 8 * (2 * Tr::kStages + stage);
  }
  __device__ __forceinline__ uint32_t v_free(int stage) const {
    return base + Tr::kBarrierOffset + 16 + 8 * (3 * Tr::kStages + stage);
  }
  __device__ __forceinline__ uint32_t unit_full(int slot) const {
    return base + Tr::kBarrierOffset + 16 + 8 * (4 * Tr::kStages + slot);
  }
  __device__ __forceinline__ uint32_t unit_free(int slot) const {
    return base + Tr::kBarrierOffset + 16 + 8 * (4 * Tr::kStages + Tr::kUnitSlots + slot);
  }
  __device__ __forceinline__ uint32_t unit(int slot) const {
    return base + Tr::kUnitOffset + Tr::kUnitSlotBytes * slot;
  }
};

// A ring position: the stage and the parity of its current use.
template <int kStages>
struct RingSlot {
  int stage = 0;
  uint32_t parity = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == kStages) {
      stage = 0;
      parity ^= 1u;
    }
  }
};

// The work units of a CTA, located (plan item, copy) by the producer thread
// and handed to the consumers (and the output warp, where it runs) through
// kUnitSlots shared-memory slots (each with a full and a free mbarrier;
// layout in slot_word). The producer draws
// them: first blockIdx.x, then gridDim.x plus the next value of a global
// counter zeroed before the launch, so a CTA that finishes early takes more
// work (a static stride over the units left up to 4% of the time idle at the
// end of causal grids). Where every unit is as long as the others (the
// pieces of a plan that splits rows to fill the device, a dense mask's rows;
// see items_of_equal_length in work_units.hpp) the launch passes no counter
// and the units go in a static stride, blockIdx.x + n gridDim.x, which needs
// no zeroed counter before the launch. Where Tr::kUnitItemsInSlots a slot
// also carries the unit's plan item, which the consumers then read from
// shared memory and the producer reads back when it loads the unit
// (produce). kNoItem ends both roles' loops.
template <typename Tr>
struct UnitRing {
  // One counter rather than a RingSlot's stage and parity: a register less
  // for the producer thread (at 40 it already keeps the grid size in local
  // memory; with a RingSlot it spilled a second word).
  static_assert((Tr::kUnitSlots & (Tr::kUnitSlots - 1)) == 0, "slot and parity come from one counter");
  static constexpr int kWords = Tr::kUnitItemsInSlots ? 9 : 2;
  static_assert(4 * kWords <= Tr::kUnitSlotBytes, "a slot holds its words");
  uint32_t uses = 0;  // slots used so far: slot uses % kUnitSlots, parity (uses / kUnitSlots) % 2
  __device__ __forceinline__ int slot() const { return static_cast<int>(uses % Tr::kUnitSlots); }
  __device__ __forceinline__ uint32_t parity() const { return (uses / Tr::kUnitSlots) & 1u; }
  // Word n of a slot: 0 plan item, 1 copy; with the item, 2-3 begin, 4-5
  // end, 6 row, 7 slot, 8 all_full.
  __device__ __forceinline__ static uint32_t slot_word(const Sm90Smem<Tr>& sm, int slot, int n) {
    return sm.unit(slot) + 4 * n;
  }
  __device__ __forceinline__ static void read(const Sm90Smem<Tr>& sm, int slot, UnitPlace& place, WorkItem& item) {
    place.item = ld_shared_u32(slot_word(sm, slot, 0));
    place.copy = ld_shared_u32(slot_word(sm, slot, 1));
    if constexpr (Tr::kUnitItemsInSlots) {
      item.begin = static_cast<int64_t>(ld_shared_u32(slot_word(sm, slot, 2))) |
                   static_cast<int64_t>(ld_shared_u32(slot_word(sm, slot, 3))) << 32;
      item.end = static_cast<int64_t>(ld_shared_u32(slot_word(sm, slot, 4))) |
                 static_cast<int64_t>(ld_shared_u32(slot_word(sm, slot, 5))) << 32;
      item.row = static_cast<int32_t>(ld_shared_u32(slot_word(sm, slot, 6)));
      item.slot = static_cast<int32_t>(ld_shared_u32(slot_word(sm, slot, 7)));
      item.all_full = static_cast<int32_t>(ld_shared_u32(slot_word(sm, slot, 8)));
    }
  }
  // Producer: the unit at `place` (and, where the slots carry it, its plan
  // item) into the next slot.
  __device__ __forceinline__ void post(const Sm90Smem<Tr>& sm, const DeviceTilePlanView& plan, UnitPlace place) {
    WorkItem item;
    if constexpr (Tr::kUnitItemsInSlots) {
      if (place.item != kNoItem) item = plan.items[place.item];
    }
    mbarrier_wait(sm.unit_free(slot()), parity() ^ 1u);
    const uint32_t words[9] = {place.item,
                               place.copy,
                               static_cast<uint32_t>(item.begin),
                               static_cast<uint32_t>(static_cast<uint64_t>(item.begin) >> 32),
                               static_cast<uint32_t>(item.end),
                               static_cast<uint32_t>(static_cast<uint64_t>(item.end) >> 32),
                               static_cast<uint32_t>(item.row),
                               static_cast<uint32_t>(item.slot),
                               static_cast<uint32_t>(item.all_full)};
#pragma unroll
    for (int n = 0; n < kWords; ++n) st_shared_u32(slot_word(sm, slot(), n), words[n]);
    mbarrier_arrive(sm.unit_full(slot()));
    ++uses;
  }
  // Producer, where the slots carry the items: the unit it posted last, read
  // back from its slot (which the next kUnitSlots - 1 posts leave alone).
  __device__ __forceinline__ void last_posted(const Sm90Smem<Tr>& sm, UnitPlace& place, WorkItem& item) const {
    read(sm, static_cast<int>((uses - 1) % Tr::kUnitSlots), place, item);
  }
  // Every consumer thread, and the output warp: the next unit, once posted
  // (its plan item into `item` where the slots carry it).
  __device__ __forceinline__ UnitPlace take(const Sm90Smem<Tr>& sm, WorkItem& item) {
    mbarrier_wait(sm.unit_full(slot()), parity());
    UnitPlace place;
    read(sm, slot(), place, item);
    mbarrier_arrive(sm.unit_free(slot()));
    ++uses;
    return place;
  }
  // A unit taken's plan item: the one its slot carried (`slot_item`) where
  // the slots carry the items, else the plan's.
  __device__ __forceinline__ static WorkItem item_of(const DeviceTilePlanView& plan, UnitPlace place,
                                                     const WorkItem& slot_item) {
    return Tr::kUnitItemsInSlots ? slot_item : plan.items[place.item];
  }
};

}  // namespace spattn::cuda_detail
