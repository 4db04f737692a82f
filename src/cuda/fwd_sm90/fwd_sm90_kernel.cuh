// cuda/fwd_sm90/fwd_sm90_kernel.cuh - the Hopper-native fused block-sparse
// attention forward kernel (sm_90a): TMA copies on mbarriers, wgmma, and warp
// specialisation (FlashAttention-3 structure, one consumer warpgroup per 64
// query rows: two, three on the 192-row tile at head dims up to 64, or one on
// the 64 x 64 tile, two CTAs to a multiprocessor).
//
// Persistent grid: CTA c runs work unit c, then units drawn from a counter
// (UnitRing), of the plan's items (longest first, tile_plan.hpp) times
// (batch, head in the mask head), in the order the launch chooses
// (common/work_units.hpp: item-major, copy-major, or copy-major in length bands).
// Per work unit both roles walk the same kept key tiles (tile_walk.cuh):
//   producer (one thread): for each kept tile, into the next free stage of
//     the ring: K(n) on "K full", V(n) on "V full"; only kept tiles are ever
//     loaded. Q (once per unit, when the consumers have freed it) follows the
//     unit's first K and V.
//   consumers (one to three warpgroups, 64 rows each), per tile:
//     wait K(n); S = Q K(n)^T            (wgmma, both from shared memory)
//     mask S: nothing on full tiles, key bounds on a ragged last tile, the
//             sub-block bits and the pattern predicate on partial tiles; in
//             the passes of a dilated split, the other pass's pairs
//             (DilatedExclusion in fwd_params.hpp) (tile_mask.cuh, the same
//             code as the sm80 kernel)
//     online softmax in fp32 with exp2   (online_softmax.cuh)
//     wait V(n); O += P V(n)             (wgmma, P from registers, V read
//                                         transposed from shared memory)
//     free stage n
//   with P(n-1) V(n-1) running on the tensor cores during the softmax of
//   tile n (consume_unit); at head dims up to 64, a unit of at least two
//   tiles, all full (outside varlen batches and dilated splits), also has
//   S(n+1) running then (consume_unit_two_scores).
//   then O / l and the LSE (or a split row's partial result) are written;
//   in the permuted pass of a dilated split (FwdParams::merge_into_out; a
//   kernel of its own, Sm90Traits::kMergeIntoOut), merged into the rest
//   pass's rows of out and the LSE; where the call allows it
//   (Sm90Traits::kTmaOutput, Sm90TensorMaps::has_o), O / l goes to shared
//   memory for the output warp (post_output).
//   output warp (warp 1 of the producer warpgroup, where O goes through
//     shared memory): takes the same units, and stores each group's rows to
//     out with the TMA (store_outputs).
// Rows past q_len and keys past k_len arrive as zeros (TMA fills outside the
// tensor); key bounds are masked in registers, rows past q_len never written.
// In a packed varlen batch (sequence_span.hpp) the maps cover the packed
// rows: a unit's tile of mask rows (positions) holds query rows from
// row0 - mask_row_offset on, which may start before the sequence's first query
// (rows of the previous sequence, or TMA zeros before the tensor, never
// written) and K, V from k_first on; keys past the sequence's end (the next
// sequence's) are masked against its k_len and rows past it never written, as
// above; tiles without a query row of the sequence are skipped by producer and
// consumers alike, and the key walk stops at its last key tile.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/dependent_launch.cuh"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/keep_bits_table.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx_sm80.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_mask.cuh"
#include "cuda/common/tile_walk.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_traits.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"
#include "spattn/pattern_terms.hpp"

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

// The order in which the consumer warpgroups issue their products: in turns
// (group 0, 1, 0, 1, ... or 0, 1, 2, 0, ...), so that one warpgroup's softmax
// runs while the others' products occupy the tensor cores (ping-pong). Each
// group waits on its own named barrier, which the group before it completes
// with pass_turn (and, once, the last group's start completes group 0's);
// every group issues the same number of times, since they walk the same tiles.
// A single group (the 64 x 64 tile) has no turns to take.
template <int kGroups>
struct IssueOrder {
  int group;
  __device__ __forceinline__ void start() const {
    if constexpr (kGroups > 1)
      if (group == kGroups - 1) named_barrier_arrive(kFirstBarrier, 256);
  }
  __device__ __forceinline__ void wait_turn() const {
    if constexpr (kGroups > 1) named_barrier_sync(kFirstBarrier + group, 256);
  }
  __device__ __forceinline__ void pass_turn() const {
    if constexpr (kGroups > 1) named_barrier_arrive(kFirstBarrier + next_group(), 256);
  }
  __device__ __forceinline__ int next_group() const {
    if constexpr (kGroups == 2) return 1 - group;
    return group + 1 == kGroups ? 0 : group + 1;
  }
  static constexpr int kFirstBarrier = 1;  // barrier 0 is __syncthreads
};

// The wgmma descriptors of one consumer warpgroup, built once: its 64 rows
// of Q, and K and V of ring stage 0 (a stage is a fixed byte offset further).
// Every operand address of a tile is then the stage's base plus compile-time
// offsets.
template <typename Tr>
struct Sm90Descriptors {
  uint64_t q, k0, v0;
  __device__ __forceinline__ Sm90Descriptors(const Sm90Smem<Tr>& sm, int group)
      : q(smem_descriptor(sm.q() + group * Tr::kGroupRows * 128, 16, 1024)),
        k0(smem_descriptor(sm.k(0), 16, 1024)),
        v0(smem_descriptor(sm.v(0), Tr::kKVPanelBytes, 1024)) {}
  __device__ __forceinline__ uint64_t k(int stage) const { return smem_descriptor_plus(k0, stage * Tr::kKVBytes); }
  __device__ __forceinline__ uint64_t v(int stage) const { return smem_descriptor_plus(v0, stage * Tr::kKVBytes); }
};

// Issues s = Q(rows of this warpgroup) K^T over the whole head dim as one
// wgmma group (not waited for).
template <typename Tr>
__device__ __forceinline__ void issue_qk(float (&s)[1][Tr::kNAtoms][4], uint64_t q_desc, uint64_t k_desc) {
  using T = typename Tr::T;
  wgmma_fence_operands(s);
  wgmma_fence();
#pragma unroll
  for (int ks = 0; ks < Tr::kHeadDim / 16; ++ks) {
    const uint32_t panel = ks / 4, step = (ks % 4) * 32;  // 16 elements = 32 bytes along the 128-byte row
    wgmma_ss<T, Tr::kBlockN>(s, smem_descriptor_plus(q_desc, panel * Tr::kQPanelBytes + step),
                             smem_descriptor_plus(k_desc, panel * Tr::kKVPanelBytes + step), ks > 0);
  }
  wgmma_commit();
}

// P (s, already exponentiated) rounded to T as the A fragments of the 16-key
// steps of P V.
template <typename Tr>
__device__ __forceinline__ void pack_p(const float (&s)[1][Tr::kNAtoms][4], uint32_t (&pa)[Tr::kBlockN / 16][4]) {
  using T = typename Tr::T;
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    pa[kk][0] = pack2<T>(s[0][2 * kk][0], s[0][2 * kk][1]);
    pa[kk][1] = pack2<T>(s[0][2 * kk][2], s[0][2 * kk][3]);
    pa[kk][2] = pack2<T>(s[0][2 * kk + 1][0], s[0][2 * kk + 1][1]);
    pa[kk][3] = pack2<T>(s[0][2 * kk + 1][2], s[0][2 * kk + 1][3]);
  }
}

// Issues o += P V as one wgmma group (not waited for): V read transposed from
// shared memory, 16 keys (16 rows of 128 bytes) per step.
template <typename Tr>
__device__ __forceinline__ void issue_pv(float (&o)[1][Tr::kDAtoms][4], const uint32_t (&pa)[Tr::kBlockN / 16][4],
                                         uint64_t v_desc) {
  using T = typename Tr::T;
  wgmma_fence_operands(o);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk)
    wgmma_rs<T, Tr::kHeadDim>(o, pa[kk], smem_descriptor_plus(v_desc, kk * 16 * 128));
  wgmma_commit();
}

// A unit's first S = Q K^T into `s`, issued in this warpgroup's turn once
// the unit's Q and the first K have arrived (not waited for).
template <typename Tr>
__device__ __forceinline__ void issue_first_qk(const Sm90Smem<Tr>& sm, const Sm90Descriptors<Tr>& desc,
                                               const IssueOrder<Tr::kConsumerGroups>& schedule,
                                               const RingSlot<Tr::kStages>& slot, uint32_t& q_parity,
                                               float (&s)[1][Tr::kNAtoms][4]) {
  mbarrier_wait(sm.q_full(), q_parity);
  q_parity ^= 1u;
  mbarrier_wait(sm.k_full(slot.stage), slot.parity);
  schedule.wait_turn();
  issue_qk<Tr>(s, desc.q, desc.k(slot.stage));
  schedule.pass_turn();
}

// O = 0 before a unit's first product.
template <typename Tr>
__device__ __forceinline__ void clear_output(float (&o)[1][Tr::kDAtoms][4]) {
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; ++d)
#pragma unroll
    for (int c = 0; c < 4; ++c) o[0][d][c] = 0.0f;
}

// A unit's last product, O += P V with V in `stage`, in this warpgroup's
// turn, waited for; then the stage's V is free.
template <typename Tr>
__device__ __forceinline__ void last_pv(const Sm90Smem<Tr>& sm, const Sm90Descriptors<Tr>& desc,
                                        const IssueOrder<Tr::kConsumerGroups>& schedule, const RingSlot<Tr::kStages>& stage,
                                        float (&o)[1][Tr::kDAtoms][4], const uint32_t (&pa)[Tr::kBlockN / 16][4]) {
  mbarrier_wait(sm.v_full(stage.stage), stage.parity);
  schedule.wait_turn();
  issue_pv<Tr>(o, pa, desc.v(stage.stage));
  schedule.pass_turn();
  wgmma_wait<0>();
  wgmma_fence_operands(o);
  mbarrier_arrive(sm.v_free(stage.stage));
}

// Output through the TMA (Tr::kTmaOutput, where the call has an output map:
// Sm90TensorMaps::has_o). A consumer warpgroup writes its 64 rows of O / l,
// rounded, with stmatrix straight into the 128-byte-swizzled layout the TMA
// reads (Q's); a warp of the producer warpgroup, the output warp
// (store_outputs), which takes the same units from the unit ring, stores
// the box, and the TMA clips rows past q_len. The consumers so have neither
// write_output's quad transposes nor its per-row addresses and stores,
// which short rows pay for in every unit (a same-run bound: without any
// epilogue window 512 ran 12% faster), nor the copy's tensor-map address,
// whose register their tile loop would miss. Two named barriers per group,
// of its 128 threads and the output warp: "output full" (the group arrives
// once its rows are written; the output warp waits) and "output free" (the
// output warp arrives once the TMA has read them, and once at the start; the
// group waits before it writes, and once at the end).
template <typename Tr>
struct OutputBarriers {
  static constexpr int kThreads = 128 + 32;
  __device__ __forceinline__ static int full(int group) {
    return IssueOrder<Tr::kConsumerGroups>::kFirstBarrier + Tr::kConsumerGroups + 2 * group;
  }
  __device__ __forceinline__ static int free(int group) { return full(group) + 1; }
};

// Consumer warpgroup `warp / 4`: its rows of a unit (O / l) to the output
// warp, and their LSE.
template <typename Tr>
__device__ __forceinline__ void post_output(const FwdParams& p, const Sm90Smem<Tr>& sm,
                                            const float (&o)[1][Tr::kDAtoms][4], const float (&m)[1][2],
                                            const float (&l)[1][2], const SequenceSpan& seq, int64_t h, int64_t q0,
                                            int warp, int lane) {
  using T = typename Tr::T;
  const int group = warp / 4;
  const RowEnd end[2] = {finish_row<Tr>(m, l, 0, 0), finish_row<Tr>(m, l, 0, 1)};
  named_barrier_sync(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);
  // Lane 8 j + i addresses row i of matrix j: rows 8 (j % 2) on, atom j / 2 of the pair.
  const int matrix = lane / 8, row = warp * Tr::kWarpRows + lane % 8 + 8 * (matrix % 2);
#pragma unroll
  for (int d = 0; d < Tr::kDAtoms; d += 2) {
    const uint32_t x[4] = {pack2<T>(o[0][d][0] * end[0].inv, o[0][d][1] * end[0].inv),
                           pack2<T>(o[0][d][2] * end[1].inv, o[0][d][3] * end[1].inv),
                           pack2<T>(o[0][d + 1][0] * end[0].inv, o[0][d + 1][1] * end[0].inv),
                           pack2<T>(o[0][d + 1][2] * end[1].inv, o[0][d + 1][3] * end[1].inv)};
    const int atom = d + matrix / 2, chunk = atom % 8;  // 8 atoms of 16 bytes to a 128-byte panel row
    stmatrix_x4(sm.o() + atom / 8 * Tr::kQPanelBytes + row * 128 + ((chunk ^ (row % 8)) << 4), x);
  }
  fence_async_proxy_shared();
  named_barrier_arrive(OutputBarriers<Tr>::full(group), OutputBarriers<Tr>::kThreads);
  if (p.lse == nullptr || (lane & 3) != 0) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t q = q0 + warp * Tr::kWarpRows + (lane >> 2) + half * 8;
    if (seq.has_row(q)) *p.lse_at(seq.batch, h, q) = end[half].lse;
  }
}

// The output warp: takes each unit from the unit ring as the consumers do,
// and for a unit they post (one not split: split rows write partial
// results), the rows of each consumer group in turn, once posted, to out
// with a TMA copy issued by lane 0, freeing them once it has read them.
template <typename Tr>
__device__ __forceinline__ void store_outputs(const FwdParams& p, const CUtensorMap& out_map,
                                              const Sm90Smem<Tr>& sm, const WorkUnits& units, int lane) {
#pragma unroll
  for (int group = 0; group < Tr::kConsumerGroups; ++group)
    named_barrier_arrive(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);  // the buffer starts free
  UnitRing<Tr> ring;
  WorkItem slot_item;
  for (UnitPlace place = ring.take(sm, slot_item); place.item != kNoItem; place = ring.take(sm, slot_item)) {
    const Sm90Work w = Sm90Work::at(units, place, UnitRing<Tr>::item_of(p.plan, place, slot_item), Tr::kBlockM);
    if (w.item.slot >= 0) continue;
#pragma unroll
    for (int group = 0; group < Tr::kConsumerGroups; ++group) {
      named_barrier_sync(OutputBarriers<Tr>::full(group), OutputBarriers<Tr>::kThreads);
      if (lane == 0) {
#pragma unroll
        for (int panel = 0; panel < Tr::kPanels; ++panel)
          tma_store_5d(&out_map, sm.o() + panel * Tr::kQPanelBytes + group * Tr::kGroupRows * 128,
                       panel * Tr::kPanelCols, 0, static_cast<int32_t>(w.row0 + group * Tr::kGroupRows),
                       static_cast<int32_t>(w.h), static_cast<int32_t>(w.b));
        bulk_commit_group();
        bulk_wait_group_read_all();
      }
      __syncwarp();
      named_barrier_arrive(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);
    }
  }
}

// A unit's rows once its last tile is done: O / l and the LSE into out
// (through the TMA where the call has an output map; in a dilated split's
// permuted pass merged with the rows there), or a split row's piece into its
// partial-result slot.
template <typename Tr>
__device__ __forceinline__ void write_unit_result(const FwdParams& p, const Sm90TensorMaps& maps,
                                                  const Sm90Smem<Tr>& sm, float (&o)[1][Tr::kDAtoms][4],
                                                  float (&m)[1][2], float (&l)[1][2], const SequenceSpan& seq,
                                                  const Sm90Work& w, uint32_t copies, int64_t q0, int warp,
                                                  int lane) {
  if constexpr (Tr::kMergeIntoOut) {
    write_output<Tr, true>(p, o, m, l, seq, w.h, q0, warp, lane);
  } else if (w.item.slot >= 0) {
    write_partial<Tr>(p, o, m, l, seq, q0, (w.item.slot * static_cast<int64_t>(copies) + w.copy) * Tr::kBlockM, warp, lane);
  } else if (Tr::kTmaOutput && maps.has_o) {
    post_output<Tr>(p, sm, o, m, l, seq, w.h, q0, warp, lane);
  } else {
    write_output<Tr>(p, o, m, l, seq, w.h, q0, warp, lane);
  }
}

// One work unit of a consumer warpgroup. Per tile n the products are issued
// as
//   S(n) = Q K(n)^T; O += P(n-1) V(n-1); wait S(n); mask, softmax of S(n)
//   (O untouched); wait P V; free stage n-1; O *= correction(n); P(n) = S(n)
// so the softmax of tile n runs while P(n-1) V(n-1) is on the tensor cores;
// the last P V follows the loop. Where Tr::kSkipsEmptyGroupTiles, a tile
// where this warpgroup's rows hold no kept sub-block (rows_hold_kept_blocks:
// a derived plan's tile half of whose rows are masked, as BigBird's on
// 64-row blocks) has neither S nor P V here: the warpgroup still takes its
// turn (the groups pass turns in a fixed cycle) and frees the tile's stages
// once they have arrived.
template <typename Tr>
__device__ __forceinline__ void consume_unit(const FwdParams& p, const Sm90TensorMaps& maps, const Sm90Smem<Tr>& sm,
                                             const Sm90Descriptors<Tr>& desc, const Sm90Work& w, uint32_t copies,
                                             RingSlot<Tr::kStages>& slot, uint32_t& q_parity,
                                             const IssueOrder<Tr::kConsumerGroups>& schedule, int warp, int lane) {
  const DeviceTilePlanView& plan = p.plan;
  const int64_t tiles_per_block = plan.blocks.block_k / Tr::kBlockN;
  const PatternExpr& expr = p.mask.exprs != nullptr ? *p.mask.expr_for_head(w.h, p.q_heads) : kNoPatternExpr;
  const SequenceSpan seq = sequence_span(p, w.b);
  const int64_t q0 = w.row0 - seq.mask_row_offset;
  if (!seq.tile_has_rows(q0, Tr::kBlockM)) return;  // no query row of its varlen sequence (produce skips it too)
  const int group_row0 = warp / 4 * Tr::kGroupRows;
  float o[1][Tr::kDAtoms][4];
  float m[1][2] = {{kNegInf, kNegInf}}, l[1][2] = {{0.0f, 0.0f}};
  clear_output<Tr>(o);

  TileWalk tile = TileWalk::entries(w.item.begin, w.item.end);
  const TileWalk::Peek first = tile.peek(plan, tiles_per_block, Tr::kBlockN, seq.k_len);
  if (first.key_tile >= 0) {
    // The current tile (`tile`, its first key, whether it is full and holds
    // kept pairs in this warpgroup's rows) and the next one, whose plan
    // entries are read while the current tile's products run, so that no
    // global-memory latency sits between two issues. What steers the loop
    // (the same in every lane anyway) is broadcast from lane 0, which tells
    // the compiler so (warp_uniform).
    const auto holds_kept_pairs = [&](const TileWalk& t) {
      if constexpr (!Tr::kSkipsEmptyGroupTiles) return true;
      return warp_uniform(static_cast<int>(rows_hold_kept_blocks(p, t, group_row0, Tr::kGroupRows))) != 0;
    };
    int64_t k0 = warp_uniform(first.key_tile) * Tr::kBlockN;
    bool full = warp_uniform(static_cast<int>(first.full));
    bool active = holds_kept_pairs(tile);
    TileWalk next = tile;
    bool has_next = false, next_full = true, next_active = true;
    int64_t next_k0 = 0;
    const auto read_next = [&] {
      next = tile;
      next.advance(tiles_per_block);
      const TileWalk::Peek ahead = next.peek(plan, tiles_per_block, Tr::kBlockN, seq.k_len);
      has_next = warp_uniform(static_cast<int>(ahead.key_tile >= 0));
      if (has_next) {
        next_k0 = warp_uniform(ahead.key_tile) * Tr::kBlockN;
        next_full = warp_uniform(static_cast<int>(ahead.full));
        next_active = holds_kept_pairs(next);
      }
    };
    // Where the unit's tiles lie in the call's table of keep bits (if any).
    const auto table_rows =
        KeepBitsRows<Tr, Tr::kConsumerThreads>::of_unit(p, w.h, q0 / Tr::kBlockM, warp * 32 + lane);
    // Keep bits of the tile (all on a full tile without exclusion), computed before S is live.
    KeepBits<Tr> keep = active ? tile_keep_bits<Tr, Tr::kConsumerThreads>(p, table_rows, expr, tile, full, seq,
                                                                           w.h, q0, k0, warp, lane)
                               : KeepBits<Tr>::none();
    float s[1][Tr::kNAtoms][4];
    uint32_t pa[Tr::kBlockN / 16][4];
    // Each branch below issues its products and waits for them all before
    // the branches join: ptxas serialises every wgmma where it cannot tell
    // which products are in flight when their registers are read.
    if (active) {
      issue_first_qk<Tr>(sm, desc, schedule, slot, q_parity, s);
      read_next();
      wgmma_wait<0>();
      wgmma_fence_operands(s);
      mbarrier_arrive(sm.k_free(slot.stage));
      if (!has_next) mbarrier_arrive(sm.q_free());  // this unit's last read of Q is done
      mask_scores<Tr>(s, full, keep, k0, seq.k_len, lane);
      softmax_update<Tr>(s, o, m, l, p.scale_log2);
      pack_p<Tr>(s, pa);
    } else {
      mbarrier_wait(sm.q_full(), q_parity);
      q_parity ^= 1u;
      mbarrier_wait(sm.k_full(slot.stage), slot.parity);
      schedule.wait_turn();
      schedule.pass_turn();
      read_next();
      mbarrier_arrive(sm.k_free(slot.stage));
      if (!has_next) mbarrier_arrive(sm.q_free());
    }
    RingSlot<Tr::kStages> previous = slot;
    bool previous_active = active;
    slot.advance();

    // One tile after the first: S(n) where this warpgroup's rows hold kept
    // pairs (`with_qk`), P(n-1) V(n-1) where the previous tile's did (`with_pv`).
    const auto step = [&](auto with_qk, auto with_pv) {
      constexpr bool kQK = decltype(with_qk)::value, kPV = decltype(with_pv)::value;
      mbarrier_wait(sm.k_full(slot.stage), slot.parity);
      mbarrier_wait(sm.v_full(previous.stage), previous.parity);
      schedule.wait_turn();
      if constexpr (kQK) issue_qk<Tr>(s, desc.q, desc.k(slot.stage));
      if constexpr (kPV) issue_pv<Tr>(o, pa, desc.v(previous.stage));
      schedule.pass_turn();
      read_next();
      if constexpr (kQK) {
        if constexpr (kPV) {
          wgmma_wait<1>();  // S(n) done; P(n-1) V(n-1) may still run
        } else {
          wgmma_wait<0>();
        }
        wgmma_fence_operands(s);
      }
      mbarrier_arrive(sm.k_free(slot.stage));
      if (!has_next) mbarrier_arrive(sm.q_free());
      float correction[1][2];
      bool max_moved = false;
      if constexpr (kQK) {
        mask_scores<Tr>(s, full, keep, k0, seq.k_len, lane);
        max_moved = softmax_scores<Tr>(s, m, l, p.scale_log2, correction);
      }
      if constexpr (kPV) {
        wgmma_wait<0>();
        wgmma_fence_operands(o);
      }
      mbarrier_arrive(sm.v_free(previous.stage));
      if constexpr (kQK) {
        if (max_moved) rescale_output<Tr>(o, correction);
        pack_p<Tr>(s, pa);
      }
    };
    using Yes = std::true_type;
    using No = std::false_type;
    while (has_next) {
      tile = next;
      k0 = next_k0;
      full = next_full;
      active = next_active;
      if (active) {
        keep = tile_keep_bits<Tr, Tr::kConsumerThreads>(p, table_rows, expr, tile, full, seq, w.h, q0, k0, warp, lane);
        if (previous_active) {
          step(Yes{}, Yes{});
        } else {
          step(Yes{}, No{});
        }
      } else if (previous_active) {
        step(No{}, Yes{});
      } else {
        step(No{}, No{});
      }
      previous = slot;
      previous_active = active;
      slot.advance();
    }
    if (previous_active) {
      last_pv<Tr>(sm, desc, schedule, previous, o, pa);
    } else {
      mbarrier_wait(sm.v_full(previous.stage), previous.parity);
      schedule.wait_turn();
      schedule.pass_turn();
      mbarrier_arrive(sm.v_free(previous.stage));
    }
  }
  write_unit_result<Tr>(p, maps, sm, o, m, l, seq, w, copies, q0, warp, lane);
}

// One kept key tile as the consumers steer by it: its place in the walk and
// its first key (warp-uniform, broadcast from lane 0), or none past the
// walk's end.
struct SteeringTile {
  TileWalk walk;
  int64_t k0 = 0;
  bool valid = false;
  // The first tile of `walk`, or the one after `before` (reads the plan from global memory).
  __device__ __forceinline__ static SteeringTile first(const TileWalk& walk, const DeviceTilePlanView& plan,
                                                       int64_t tiles_per_block, int64_t block_n, int64_t k_len) {
    SteeringTile t;
    t.walk = walk;
    const int64_t key_tile = t.walk.key_tile_or_end(plan, tiles_per_block, block_n, k_len);
    t.valid = warp_uniform(static_cast<int>(key_tile >= 0));
    if (t.valid) t.k0 = warp_uniform(key_tile) * block_n;
    return t;
  }
  __device__ __forceinline__ static SteeringTile after(const TileWalk& before, const DeviceTilePlanView& plan,
                                                       int64_t tiles_per_block, int64_t block_n, int64_t k_len) {
    TileWalk walk = before;
    walk.advance(tiles_per_block);
    return first(walk, plan, tiles_per_block, block_n, k_len);
  }
};

// Whether a unit runs on consume_unit_two_scores: an item of at least two
// tiles, every one full (WorkItem::all_full, from the plan), in a launch
// without exclusions or varlen sequences (whose key walk may stop early).
__device__ __forceinline__ bool runs_two_scores(const FwdParams& p, const Sm90Work& w) {
  return w.item.all_full != 0 && p.exclude.kind == Exclusion::None && p.varlen.cu_seqlens_q == nullptr;
}

// One work unit of a consumer warpgroup at head dims up to 64, where the
// exponentials of a tile take as long as its products, for a unit whose
// tiles are all full (runs_two_scores): two score tiles live in registers, so
// that while the softmax of tile n runs, the tensor cores hold
// S(n+1) = Q K(n+1)^T beside P(n-1) V(n-1), and so have work queued from both
// warpgroups while either runs its softmax. Per tile n (S(n) done):
//   O += P(n-1) V(n-1); S(n+1) = Q K(n+1)^T; mask (key bounds), softmax of
//   S(n); wait both; free V(n-1) and K(n+1); O *= correction(n); P(n) = S(n)
// Every step issues the same products and ends with none running: ptxas
// serialises every wgmma where it cannot tell which products run when a
// product's registers are read or written (so partial tiles, whose keep bits
// would also spill beside two score tiles, stay on consume_unit). Stages in
// use at once: n-1 (V), n, n+1 (K).
template <typename Tr>
__device__ __forceinline__ void consume_unit_two_scores(const FwdParams& p, const Sm90TensorMaps& maps,
                                                        const Sm90Smem<Tr>& sm,
                                                        const Sm90Descriptors<Tr>& desc, const Sm90Work& w,
                                                        uint32_t copies, RingSlot<Tr::kStages>& slot,
                                                        uint32_t& q_parity, const IssueOrder<Tr::kConsumerGroups>& schedule, int warp,
                                                        int lane) {
  static_assert(Tr::kStages >= 3, "tiles n - 1, n and n + 1 hold a stage each");
  const DeviceTilePlanView& plan = p.plan;
  const int64_t tiles_per_block = plan.blocks.block_k / Tr::kBlockN;
  const SequenceSpan seq = sequence_span(p, w.b);
  const int64_t q0 = w.row0 - seq.mask_row_offset;
  float o[1][Tr::kDAtoms][4];
  float m[1][2] = {{kNegInf, kNegInf}}, l[1][2] = {{0.0f, 0.0f}};
  clear_output<Tr>(o);
  const KeepBits<Tr> keep = KeepBits<Tr>::all();
  float s_a[1][Tr::kNAtoms][4], s_b[1][Tr::kNAtoms][4];
  uint32_t pa[Tr::kBlockN / 16][4];

  SteeringTile now = SteeringTile::first(TileWalk::entries(w.item.begin, w.item.end), plan, tiles_per_block,
                                         Tr::kBlockN, seq.k_len);
  SteeringTile next = SteeringTile::after(now.walk, plan, tiles_per_block, Tr::kBlockN, seq.k_len);
  issue_first_qk<Tr>(sm, desc, schedule, slot, q_parity, s_a);
  wgmma_wait<0>();
  wgmma_fence_operands(s_a);
  mbarrier_arrive(sm.k_free(slot.stage));
  RingSlot<Tr::kStages> previous = slot;  // the stage of P(n-1)'s V
  slot.advance();
  // Tile 0 (runs_two_scores: a tile 1 follows): S(1) runs during its softmax.
  {
    const SteeringTile after = SteeringTile::after(next.walk, plan, tiles_per_block, Tr::kBlockN, seq.k_len);
    mbarrier_wait(sm.k_full(slot.stage), slot.parity);
    schedule.wait_turn();
    issue_qk<Tr>(s_b, desc.q, desc.k(slot.stage));
    schedule.pass_turn();
    mask_scores<Tr>(s_a, true, keep, now.k0, seq.k_len, lane);
    softmax_update<Tr>(s_a, o, m, l, p.scale_log2);
    wgmma_wait<0>();
    wgmma_fence_operands(s_b);
    mbarrier_arrive(sm.k_free(slot.stage));
    if (!after.valid) mbarrier_arrive(sm.q_free());  // this unit's last read of Q is done
    pack_p<Tr>(s_a, pa);
    now = next;
    next = after;
  }
  // Tile n, with S(n) done in s_now and a tile n + 1 after it, whose S goes to s_next.
  const auto step = [&](float(&s_now)[1][Tr::kNAtoms][4], float(&s_next)[1][Tr::kNAtoms][4]) {
    const SteeringTile after = SteeringTile::after(next.walk, plan, tiles_per_block, Tr::kBlockN, seq.k_len);
    RingSlot<Tr::kStages> next_slot = slot;
    next_slot.advance();
    mbarrier_wait(sm.v_full(previous.stage), previous.parity);
    mbarrier_wait(sm.k_full(next_slot.stage), next_slot.parity);
    schedule.wait_turn();
    issue_pv<Tr>(o, pa, desc.v(previous.stage));
    issue_qk<Tr>(s_next, desc.q, desc.k(next_slot.stage));
    schedule.pass_turn();
    mask_scores<Tr>(s_now, true, keep, now.k0, seq.k_len, lane);
    float correction[1][2];
    const bool max_moved = softmax_scores<Tr>(s_now, m, l, p.scale_log2, correction);
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    wgmma_fence_operands(s_next);
    mbarrier_arrive(sm.v_free(previous.stage));
    mbarrier_arrive(sm.k_free(next_slot.stage));
    if (!after.valid) mbarrier_arrive(sm.q_free());
    if (max_moved) rescale_output<Tr>(o, correction);
    pack_p<Tr>(s_now, pa);
    previous = slot;
    slot = next_slot;
    now = next;
    next = after;
  };
  // The unit's last tile n, with S(n) done in s_now: its softmax beside P(n-1) V(n-1), then P(n) V(n).
  const auto last = [&](float(&s_now)[1][Tr::kNAtoms][4]) {
    mbarrier_wait(sm.v_full(previous.stage), previous.parity);
    schedule.wait_turn();
    issue_pv<Tr>(o, pa, desc.v(previous.stage));
    schedule.pass_turn();
    mask_scores<Tr>(s_now, true, keep, now.k0, seq.k_len, lane);
    float correction[1][2];
    const bool max_moved = softmax_scores<Tr>(s_now, m, l, p.scale_log2, correction);
    wgmma_wait<0>();
    wgmma_fence_operands(o);
    mbarrier_arrive(sm.v_free(previous.stage));
    if (max_moved) rescale_output<Tr>(o, correction);
    pack_p<Tr>(s_now, pa);
    last_pv<Tr>(sm, desc, schedule, slot, o, pa);
    slot.advance();
  };
  for (;;) {
    if (!next.valid) {
      last(s_b);
      break;
    }
    step(s_b, s_a);
    if (!next.valid) {
      last(s_a);
      break;
    }
    step(s_a, s_b);
  }
  write_unit_result<Tr>(p, maps, sm, o, m, l, seq, w, copies, q0, warp, lane);
}

template <typename Tr>
__device__ __forceinline__ void consume(const FwdParams& p, const Sm90TensorMaps& maps, const Sm90Smem<Tr>& sm,
                                        const WorkUnits& units) {
  const int consumer_thread = static_cast<int>(threadIdx.x) - 128;
  const int group = warp_uniform(consumer_thread / 128), warp = consumer_thread / 32, lane = consumer_thread % 32;
  const Sm90Descriptors<Tr> desc(sm, group);
  RingSlot<Tr::kStages> slot;
  uint32_t q_parity = 0;
  const IssueOrder<Tr::kConsumerGroups> schedule{group};
  schedule.start();
  UnitRing<Tr> ring;
  WorkItem slot_item;  // the unit's plan item, where the slots carry it
  for (UnitPlace place = ring.take(sm, slot_item); place.item != kNoItem; place = ring.take(sm, slot_item)) {
    const Sm90Work w = Sm90Work::at(units, place, UnitRing<Tr>::item_of(p.plan, place, slot_item), Tr::kBlockM);
    if constexpr (Tr::kTwoScoreTiles) {
      if (runs_two_scores(p, w)) {
        consume_unit_two_scores<Tr>(p, maps, sm, desc, w, units.copies, slot, q_parity, schedule, warp, lane);
        continue;
      }
    }
    consume_unit<Tr>(p, maps, sm, desc, w, units.copies, slot, q_parity, schedule, warp, lane);
  }
  // The output warp's last arrival at "output free" (the buffer it freed last).
  if constexpr (Tr::kTmaOutput)
    if (maps.has_o) named_barrier_sync(OutputBarriers<Tr>::free(group), OutputBarriers<Tr>::kThreads);
}

template <typename Tr>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kCtasPerSm)
    fwd_sm90_kernel(const FwdParams p, const __grid_constant__ Sm90TensorMaps maps, const Sm90Schedule schedule) {
  extern __shared__ __align__(1024) unsigned char smem[];
  const Sm90Smem<Tr> sm{(smem_address(smem) + 1023u) & ~1023u};
  const WorkUnits units(p, schedule.order);
  allow_dependent_launch();  // the merge of split rows may launch now and wait for this grid

  if (threadIdx.x == 0) {
    mbarrier_init(sm.q_full(), 1);
    mbarrier_init(sm.q_free(), Tr::kConsumerThreads);
    for (int stage = 0; stage < Tr::kStages; ++stage) {
      mbarrier_init(sm.k_full(stage), 1);
      mbarrier_init(sm.v_full(stage), 1);
      mbarrier_init(sm.k_free(stage), Tr::kConsumerThreads);
      mbarrier_init(sm.v_free(stage), Tr::kConsumerThreads);
    }
    for (int slot = 0; slot < Tr::kUnitSlots; ++slot) {
      mbarrier_init(sm.unit_full(slot), 1);
      // Freed by every consumer thread, and by the output warp where it runs.
      mbarrier_init(sm.unit_free(slot), Tr::kConsumerThreads + (Tr::kTmaOutput && maps.has_o ? 32 : 0));
    }
    mbarrier_init_fence();
  }
  __syncthreads();

  if (threadIdx.x < 128) {
    warpgroup_release_registers<Tr::kProducerRegisters>();
    if (threadIdx.x == 0) produce<Tr>(p, maps, sm, units, schedule.counter);
    if constexpr (Tr::kTmaOutput)
      if (maps.has_o && threadIdx.x / 32 == 1) store_outputs(p, maps.o, sm, units, static_cast<int>(threadIdx.x % 32));
  } else {
    warpgroup_claim_registers<Tr::kConsumerRegisters>();
    consume<Tr>(p, maps, sm, units);
  }
}

}  // namespace spattn::cuda_detail
