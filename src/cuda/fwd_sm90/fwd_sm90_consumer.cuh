// cuda/fwd_sm90/fwd_sm90_consumer.cuh - a consumer warpgroup of the Hopper
// forward kernel (fwd_sm90_kernel.cuh): takes each work unit from the unit
// ring and walks its kept key tiles, masking, online softmax and products
// per tile (consume_unit; consume_unit_two_scores for all-full units at head
// dims up to 64), then writes the unit's rows (fwd_sm90_output.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

#include "cuda/common/fwd_params.hpp"
#include "cuda/common/keep_bits_table.cuh"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/sequence_span.hpp"
#include "cuda/common/tile_mask.cuh"
#include "cuda/common/tile_walk.cuh"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm90/fwd_sm90_output.cuh"
#include "cuda/fwd_sm90/fwd_sm90_pipeline.cuh"
#include "cuda/fwd_sm90/fwd_sm90_products.cuh"
#include "cuda/fwd_sm90/tensor_maps.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {

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
                                                        uint32_t& q_parity,
                                                        const IssueOrder<Tr::kConsumerGroups>& schedule, int warp,
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

}  // namespace spattn::cuda_detail
