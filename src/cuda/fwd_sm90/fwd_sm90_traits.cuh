// cuda/fwd_sm90/fwd_sm90_traits.cuh - tile shapes, warp roles and the
// shared-memory layout of the Hopper forward kernel.
//
// A CTA computes a query tile of 64 rows per consumer warpgroup against key
// tiles of kBlockN keys (128, or 64: at head dim 256, and at head dims 64
// and 128 for masks whose blocks fill 64-key tiles better; the tiles in
// fwd_sm90.hpp):
// warpgroup 0 is the producer (one thread issues the TMA copies; it keeps few
// registers), the others are consumers (two; three on the 192-row tile at
// head dims up to 64; one on the 64 x 64 tile, which runs two CTAs per
// multiprocessor), each owning 64 query rows
// (one wgmma m64 tile; warp w of the pair owns rows 16 w .. 16 w + 15 in the
// m16n8 accumulator layout, so the shared mask and softmax code of the sm80
// kernel applies with kMAtoms = 1, kNAtoms = kBlockN / 8).
//
// Shared memory, every tile in 64-column panels of 128-byte rows with the
// 128-byte swizzle (what the TMA writes and wgmma reads; ptx_sm90.cuh):
//   Q            kPanels x (kBlockM rows x 128 B)
//   K, V stage s kPanels x (kBlockN keys x 128 B) each, kStages stages
//   O            as Q, where kTmaOutput (the unit's output, bound for the TMA)
//   mbarriers    Q full / Q free, per stage K full, V full, K free, V free,
//                per unit slot unit full, unit free
//   unit slots   kUnitSlots located work units (plan item, copy: 2 x uint32;
//                with kUnitItemsInSlots the item's fields too, 9 x uint32)
#pragma once

#include <cstdint>

#include "cuda/fwd_sm90/fwd_sm90.hpp"

namespace spattn::cuda_detail {

template <typename T_, int kHeadDim_, int kConsumerGroups_, int kBlockN_, bool kMergeIntoOut_ = false>
struct Sm90Traits {
  using T = T_;
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kConsumerGroups = kConsumerGroups_;
  static constexpr int kBlockM = 64 * kConsumerGroups;  // query rows per CTA
  static constexpr int kBlockN = kBlockN_;  // keys per tile
  // The kernel of a dilated split's permuted pass (FwdParams::merge_into_out):
  // it merges each row into the rest pass's output and LSE, reading them
  // before it writes (write_output), and has no split rows. A kernel of its
  // own, so that the other calls' code carries neither the merge nor the
  // registers its reads take (compiled into every kernel it made ptxas spill
  // more: 4 -> 116 bytes on the two-group kernel at D = 64).
  static constexpr bool kMergeIntoOut = kMergeIntoOut_;
  // CTAs per multiprocessor (as the plans count them): two on the 64 x 64
  // tile, of one consumer warpgroup each, whose products and softmax
  // interleave as two warpgroups of one CTA do; one on the others.
  static constexpr int kCtasPerSm = sm90_ctas_per_sm(TileShape{kBlockM, kBlockN});
  static constexpr int kConsumerThreads = kConsumerGroups * 128;
  static constexpr int kThreads = 128 + kConsumerThreads;
  static constexpr int kGroupRows = kBlockM / kConsumerGroups;  // rows of one wgmma m64 tile
  static constexpr int kMAtoms = 1;                              // 16-row MMA tiles per warp
  static constexpr int kWarpRows = 16;
  static constexpr int kNAtoms = kBlockN / 8;
  static constexpr int kDAtoms = kHeadDim / 8;
  // K/V stages: D = 128 on 128-key tiles ran 0.4-1.9% slower with 3 than
  // with 2 (same-run A/B); 64-key tiles at D = 128 take half the shared
  // memory per stage, and their products last half as long. One consumer
  // group at D = 128 (two CTAs per multiprocessor): two stages, as three
  // would leave the two CTAs 416 bytes short of the multiprocessor's
  // shared memory.
  static constexpr int kStages = kHeadDim <= 64                      ? 5
                                 : kConsumerGroups == 1               ? 2
                                 : kHeadDim <= 128 && kBlockN == 64 ? 4
                                                                      : 2;
  // Whether a consumer warpgroup skips the products of tiles where its rows
  // hold no kept sub-block (consume_unit): on the narrow tile at D <= 128,
  // which calls take for masks whose blocks fill it far better than the wide
  // one (BigBird on 64-row blocks: +9%, same-run A/B on an H200). Elsewhere
  // the branches cost more than they save (causal at mask block 64 on the
  // wide tile -7%, dense on the tall tile -6%), and a lone consumer group
  // covers every row of its tile, so each tile of its plan holds a kept
  // sub-block of its rows.
  static constexpr bool kSkipsEmptyGroupTiles = kBlockN == 64 && kHeadDim <= 128 && kConsumerGroups >= 2;
  static_assert(kConsumerGroups == 2 || (kConsumerGroups == 3 && kHeadDim <= 64) ||
                    (kConsumerGroups == 1 && kBlockN == 64 && kHeadDim <= 128),
                "three consumer groups fit the registers at head dims up to 64; one group (two CTAs per "
                "multiprocessor) fits the shared memory with 64-key tiles at head dims up to 128");
  static_assert(kBlockN == 64 || (kBlockN == 128 && kHeadDim <= 128),
                "64-key tiles, or 128-key tiles at head dims up to 128 (whose scores fit beside O)");
  // Two score tiles in registers for units whose tiles are all full
  // (consume_unit_two_scores) where the exponentials of a tile take as long
  // as its products; at D = 128 the second tile does not fit beside O, nor
  // with three consumer groups (which hide one group's exponentials behind
  // the other two groups' products instead). Not in the permuted pass,
  // whose rows exclude the rest's pairs (runs_two_scores).
  static constexpr bool kTwoScoreTiles = kHeadDim <= 64 && kConsumerGroups <= 2 && !kMergeIntoOut;
  // Every eighth 8-key column's exponentials on the FMA pipe
  // (online_softmax.cuh) where one or two consumer groups meet D = 64's
  // exponentials; the three-group kernel, whose groups hide each other's
  // exponentials, runs faster with none there (same-run A/B: 1.8-3.7%).
  static constexpr int kExp2PolyEvery = kHeadDim <= 64 && kConsumerGroups <= 2 ? 8 : 0;
  // Registers per thread after setmaxnreg, within the CTA's pool (the launch
  // bound's count; a larger total would leave setmaxnreg waiting forever).
  // Two consumer groups: 384 x 168, as 128 x 40 + 256 x 232 = 64512. With 24
  // for the producer, which locates and hands over the work units, it spilled
  // in its tile loop; at 40 it keeps one word (the grid size) in local
  // memory, reloaded once per unit. The consumers fit 232. Three groups:
  // 512 x 128, as 128 x 32 + 384 x 160 = 65536 (the consumers spill a few
  // words: one score tile, P and an O of 32 registers at D = 64). One group,
  // two CTAs per multiprocessor: 256 x 128 each, as 128 x 40 + 128 x 216
  // (at D = 128: an O of 64 registers, a 64 x 64 score tile of 32 and P of
  // 16).
  static constexpr int kProducerRegisters = kConsumerGroups == 3 ? 32 : 40;
  static constexpr int kConsumerRegisters = kConsumerGroups == 1 ? 216 : (kConsumerGroups == 2 ? 232 : 160);
  static constexpr int kRegisterPool = kThreads * (65536 / kCtasPerSm / kThreads / 8 * 8);  // launch bound's
  static_assert(128 * kProducerRegisters + kConsumerThreads * kConsumerRegisters <= kRegisterPool,
                "setmaxnreg stays within the CTA's register pool");

  static constexpr int kPanelCols = 128 / static_cast<int>(sizeof(T));  // elements per 128-byte row
  static constexpr int kPanels = kHeadDim / kPanelCols;
  static constexpr uint32_t kQPanelBytes = kBlockM * 128;
  static constexpr uint32_t kKVPanelBytes = kBlockN * 128;
  static constexpr uint32_t kQBytes = kPanels * kQPanelBytes;
  static constexpr uint32_t kKVBytes = kPanels * kKVPanelBytes;
  static constexpr uint32_t kKOffset = kQBytes;
  static constexpr uint32_t kVOffset = kKOffset + kStages * kKVBytes;
  // Whether a unit's output goes through shared memory and the TMA
  // (post_output and store_outputs in fwd_sm90_output.cuh, where the call
  // allows it): a buffer laid out as Q's, which the tiles up to D = 128 have
  // room for; D = 256 has none, the three-group tile's consumers (160 registers)
  // spilled 98 bytes with it, and the permuted pass of a dilated split
  // merges its rows into out, which the TMA cannot.
  static constexpr bool kTmaOutput = kHeadDim <= 128 && kConsumerGroups <= 2 && !kMergeIntoOut;
  static constexpr uint32_t kOOffset = kVOffset + kStages * kKVBytes;
  static constexpr uint32_t kOBytes = kTmaOutput ? kQBytes : 0;
  static constexpr uint32_t kBarrierOffset = kOOffset + kOBytes;
  // Work units handed from the producer to the consumers: a ring of located
  // units (plan item, copy), each slot with a full and a free mbarrier. At
  // head dims up to 64 a slot also carries the unit's plan item, and the
  // producer keeps no unit state across its loads (UnitRing, produce): its
  // 32 registers on the tall tile and 40 on the two-group kernel spilled
  // (98 and 4 bytes) otherwise, and dense and causal ran 3-4% faster
  // without the spills (same-run A/B on an H200). At D = 128 the
  // same change lost 2-5% (its cause not found), so there a slot holds the
  // place alone.
  static constexpr int kUnitSlots = 4;
  static constexpr bool kUnitItemsInSlots = kHeadDim <= 64;
  static constexpr uint32_t kUnitSlotBytes = kUnitItemsInSlots ? 48 : 8;
  static constexpr int kBarriers = 2 + 4 * kStages + 2 * kUnitSlots;
  static constexpr uint32_t kUnitOffset = kBarrierOffset + kBarriers * 8;
  // 1024 bytes of slack: the dynamic shared memory is aligned to 1024 by hand.
  static constexpr int kSmemBytes = static_cast<int>(kUnitOffset + kUnitSlots * kUnitSlotBytes) + 1024;

  static_assert(kHeadDim % kPanelCols == 0, "head dim is a whole number of 128-byte panels");
  static_assert(kMAtoms * kNAtoms * 4 <= 64, "the partial-tile mask is one 64-bit word per thread");
  static_assert(kSmemBytes <= 227 * 1024, "fits the shared memory of an sm90 CTA");
  static_assert(kCtasPerSm * (kSmemBytes + 1024) <= 228 * 1024, "the CTAs fit one multiprocessor's shared memory");
};

}  // namespace spattn::cuda_detail
