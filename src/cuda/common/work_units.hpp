// cuda/common/work_units.hpp - the work units of both forward kernels and
// their order: which (plan item, copy) a unit number stands for (a CTA of
// the portable kernel, a turn of the Hopper kernel's persistent grid), and
// which order a launch takes. Host and device code (the tests check the
// mapping on the host).
#pragma once

#include <cstdint>
#include <optional>

#include "cuda/common/device_info.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/device_plan_view.hpp"
#include "spattn/hd.hpp"

namespace spattn::cuda_detail {

// The order of the work units (WorkUnits). Item-major where the keys and
// values of all heads fit in L2; otherwise copy-major, in length bands where
// the grid is short enough for the tail to matter (choose_unit_order).
enum class UnitOrder : int32_t { kItemMajor, kCopyMajor, kCopyMajorBanded };

// The grid's units are the plan's items times `copies` = batch x heads per
// mask head. Item-major (unit = item x copies + copy) starts the longest
// items of every head first. Copy-major runs the items copy by copy (head by
// head for a mask shared by the heads; a per-head mask's items hold the head
// and go head by head within each length band of the plan), longest first
// to within a band, so the CTAs running at one time mostly read the same
// head's keys and values and find them in L2 (same-run A/B on an H100,
// 32K, H = 16, D = 128, against item-major, sm90 kernel: random blocks 438
// -> 569, BigBird 339 -> 382, dense 597 -> 626 TFLOP/s; sm80 kernel: dense
// 315 -> 332, random 282 -> 306, window 254 -> 264). Banded copy-major does so
// within each length band of the plan (tile_plan.hpp, band_first), so the
// order stays longest first to within the band's factor 3/2. The counts are
// divided once per kernel role (once per CTA on sm80, per role on sm90), and
// units are decoded in 32-bit arithmetic (64-bit division is a long software
// routine); the launches check that the unit count fits.
struct WorkUnits {
  uint32_t heads_per_mask_head, copies, items, q_tiles, q_per_kv;
  int64_t count;
  UnitOrder order;
  SPATTN_HD WorkUnits(const FwdParams& p, UnitOrder order_)
      : heads_per_mask_head(static_cast<uint32_t>(p.q_heads / p.plan.blocks.num_heads)),
        copies(static_cast<uint32_t>(p.batch) * heads_per_mask_head),
        items(static_cast<uint32_t>(p.plan.num_items)),
        q_tiles(static_cast<uint32_t>(p.plan.num_q_tiles)),
        q_per_kv(static_cast<uint32_t>(p.q_heads / p.kv_heads)),
        count(p.plan.num_items * copies),
        order(order_) {}
};

// The order for a launch that runs `ctas` CTAs at a time over `copies`
// copies of the plan, whose keys and values take `kv_bytes` (kv_bytes_read)
// against an L2 of `l2_bytes`.
// Plain copy-major lets the last copy's longest item start near the end of
// the grid; that costs little while the longest item is short against the
// work per CTA (at most 1/8 of it: 32K causal rows at 16 heads, 6%), and
// bands, which read every head's keys and values once per band, cost more
// there (same-run A/B on an H100, bf16, D = 128: 32K causal 632 -> 618,
// BigBird 397 -> 386 TFLOP/s with bands). Shorter grids run in bands (8K
// causal rows at 16 heads, 25%: 564 -> 606). A plan of unknown item lengths
// (items built on the device) never runs in bands.
inline UnitOrder choose_unit_order(const DeviceTilePlanView& plan, int64_t copies, int64_t ctas, int64_t kv_bytes,
                                   int64_t l2_bytes) {
  if (kv_bytes <= l2_bytes) return UnitOrder::kItemMajor;
  const bool long_tail = 8 * plan.max_item_entries * ctas > plan.total_item_entries * copies;
  return plan.band_first != nullptr && long_tail ? UnitOrder::kCopyMajorBanded : UnitOrder::kCopyMajor;
}

// The bytes of K and V a launch reads: every kv head's rows of every batch
// element (of the packed batch), every residue's in a permuted pass that
// reads them in place.
inline int64_t kv_bytes_read(const FwdParams& p, int64_t head_dim, int64_t element_bytes) {
  const bool packed = p.varlen.cu_seqlens_q != nullptr;
  const int64_t k_rows = packed ? p.varlen.total_k : p.batch * p.k_len;
  return 2 * p.kv_heads * k_rows * p.residue_rate * head_dim * element_bytes;
}

// Whether every item of the plan has the same number of entries, within one
// (the pieces of a plan that splits rows to fill the device, a dense mask's
// rows); false for items built on the device (lengths unknown).
inline bool items_of_equal_length(const DeviceTilePlanView& plan) {
  return plan.min_item_entries > 0 && plan.max_item_entries - plan.min_item_entries <= 1;
}

// Whether the units of a launch are as long as each other: items of equal
// length outside varlen batches (whose sequences cut the walks short). A
// static stride over them then keeps every CTA as busy as drawing them from
// a counter does.
inline bool items_of_equal_length(const FwdParams& p) {
  return p.varlen.cu_seqlens_q == nullptr && items_of_equal_length(p.plan);
}

// The copies of the plan a launch runs (batch x query heads per mask head):
// its work units are the plan's items times these.
inline int64_t launch_copies(const FwdParams& p) { return p.batch * (p.q_heads / p.plan.blocks.num_heads); }

// The order of a launch on `device` whose CTAs, `resident_ctas` at a time,
// run the plan of `p` for every copy: the forced order if one is set, else
// choose_unit_order with the launch's K and V bytes and the device's L2.
UnitOrder launch_unit_order(const FwdParams& p, const DeviceInfo& device, int64_t resident_ctas, int64_t head_dim,
                            int64_t element_bytes);

// Makes every launch use `order` (std::nullopt, the default: each launch
// chooses; banded copy-major becomes plain copy-major on a plan without
// bands), so that tests can run each order on problems whose keys and values
// fit in L2, and returns the order forced before. Process-wide; set it while
// no other thread launches.
std::optional<UnitOrder> force_unit_order(std::optional<UnitOrder> order);

// A work unit located: its plan item and its copy (batch x heads per mask
// head + head in the mask head); kNoItem ends the loops.
struct UnitPlace {
  uint32_t item, copy;
};
constexpr uint32_t kNoItem = 0xffffffffu;

// The unit's place; a binary search over the bands (sm90: once per unit, by
// the producer thread; sm80: by every thread of the CTA, once).
SPATTN_HD UnitPlace locate_unit(const DeviceTilePlanView& plan, const WorkUnits& units, uint32_t unit) {
  if (unit >= units.count) return {kNoItem, 0};
  if (units.order == UnitOrder::kItemMajor) return {unit / units.copies, unit % units.copies};
  uint32_t first = 0, end = units.items;
  if (units.order == UnitOrder::kCopyMajorBanded) {
    int64_t low = 0, high = plan.num_bands;  // copies x band_first[low] <= unit < copies x band_first[high]
    while (high - low > 1) {
      const int64_t mid = (low + high) / 2;
      if (units.copies * static_cast<uint32_t>(plan.band_first[mid]) <= unit)
        low = mid;
      else
        high = mid;
    }
    first = static_cast<uint32_t>(plan.band_first[low]);
    end = static_cast<uint32_t>(plan.band_first[low + 1]);
  }
  const uint32_t within = unit - units.copies * first, band_items = end - first;
  return {first + within % band_items, within / band_items};
}

}  // namespace spattn::cuda_detail
