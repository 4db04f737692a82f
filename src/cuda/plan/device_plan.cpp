// cuda/plan/device_plan.cpp - creation and lookup of the mask's device copies
// (see device_plan.hpp).
//
// The cache object hangs off BlockMask::device_cache(); one process-wide mutex
// guards the slot and the lookups (creation happens once per mask, device and
// tile shape; lookups are a short scan). The pattern's expressions and tables
// go through DeviceExprs; masks built on the device are adopted as they are.
#include "cuda/plan/device_plan.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "cuda/plan/device_exprs.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

using pattern_math::ceil_div;

struct TilePlanEntry {
  TileShape tile;
  PlanSplit split;
  std::vector<DevicePtr> arrays;
  DeviceTilePlanView view;
};

// The places of walked entries among the partial ones (partial_entry_slots) on the device.
struct PartialSlots {
  const int32_t* slots = nullptr;
  int64_t partial = 0, entries = 0;
};

// The device copy of the mask at one tile's granularity, shared by the tile's plans.
struct TileGrainEntry {
  TileShape tile;
  std::vector<DevicePtr> arrays;
  BlockMaskView blocks;
  const uint64_t* sub_present = nullptr;
  const uint64_t* sub_full = nullptr;
  PartialSlots partial;
};

struct PerDevice {
  int device = -1;
  std::vector<DevicePtr> arrays;
  DeviceMaskView mask;
  std::vector<std::unique_ptr<TileGrainEntry>> tile_grains;
  std::vector<std::unique_ptr<TilePlanEntry>> tile_plans;
  std::map<const void*, const int32_t*> tables;  // device_table(), by host address
  std::shared_ptr<const DeviceExprs> exprs;
  std::shared_ptr<const void> adopted;  // arrays built on the device (adopt_device_mask)
  std::optional<PartialSlots> partial;  // of the mask's own entries, made with its first plan that walks them
  PlanTables plan_tables;               // made by calls (DeviceTilePlanView::tables)
};

struct MaskCache {
  std::vector<std::unique_ptr<PerDevice>> devices;
  // The dilated split per kernel tile it was made for (null: the pattern has none).
  std::vector<std::pair<TileShape, std::shared_ptr<const DilatedSplit>>> dilated;
  // plan_key_tiles per kernel tile, and the rows' key tiles it was summed
  // from where the tile needs the mask at its granularity (empty where it
  // walks the mask itself), which that derivation then does not count again.
  std::vector<std::pair<TileShape, int64_t>> key_tiles;
  std::vector<std::pair<TileShape, std::vector<int64_t>>> grain_row_counts;
  // The mask at the granularity of each kernel tile (null: walked directly),
  // kept on the host for the mask's lifetime: the fill and whole-row plans a
  // later call asks for are made from it.
  std::vector<std::pair<TileShape, std::shared_ptr<const TileGrainMask>>> tile_grains;
};

MaskCache& mask_cache(const BlockMask& mask) {
  std::shared_ptr<void>& slot = mask.device_cache();
  if (!slot) slot = std::make_shared<MaskCache>();
  return *static_cast<MaskCache*>(slot.get());
}

// The value kept for `tile` in `entries` (host values of the mask, one per
// kernel tile), made by `make` on first use.
template <typename T, typename Make>
const T& per_tile(std::vector<std::pair<TileShape, T>>& entries, TileShape tile, const Make& make) {
  for (const auto& [made_for, value] : entries)
    if (made_for == tile) return value;
  entries.emplace_back(tile, make());
  return entries.back().second;
}

// The rows' key tiles of the mask at `tile`'s granularity (tile_grain_row_counts), counted once.
const std::vector<int64_t>& row_counts(const BlockMask& mask, TileShape tile) {
  return per_tile(mask_cache(mask).grain_row_counts, tile, [&] { return tile_grain_row_counts(mask, tile); });
}

std::mutex& cache_mutex() {
  static std::mutex m;
  return m;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

// A device copy of `count` values at `host`, kept in `arrays`; null for none
// (the plan views read an absent array as null).
template <typename T>
const T* upload(std::vector<DevicePtr>& arrays, const T* host, int64_t count) {
  const size_t bytes = static_cast<size_t>(count) * sizeof(T);
  if (bytes == 0) return nullptr;
  arrays.push_back(device_alloc(bytes, "cudaMalloc of a mask array"));
  check_cuda(cudaMemcpy(arrays.back().get(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy of a mask array");
  return static_cast<const T*>(arrays.back().get());
}

template <typename T>
const T* upload(std::vector<DevicePtr>& arrays, const std::vector<T>& host) {
  return upload(arrays, host.data(), static_cast<int64_t>(host.size()));
}

// The device copy of partial_entry_slots(kv_full), kept in `arrays`.
PartialSlots upload_partial_slots(std::vector<DevicePtr>& arrays, const std::vector<uint8_t>& kv_full) {
  PartialSlots p;
  const std::vector<int32_t> slots = partial_entry_slots(kv_full);
  p.slots = upload(arrays, slots);
  p.entries = static_cast<int64_t>(kv_full.size());
  p.partial = std::count_if(slots.begin(), slots.end(), [](int32_t slot) { return slot >= 0; });
  return p;
}

constexpr const char* kNoPlanWhileCapturing =
    "CUDA backend: the mask has no device plan yet and the stream is capturing a graph; "
    "call cuda_prepare_mask before the capture";

void require_not_capturing(cudaStream_t stream) { require(!capturing(stream), kNoPlanWhileCapturing); }

PerDevice& per_device(const BlockMask& mask, cudaStream_t stream) {
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  MaskCache& cache = mask_cache(mask);
  for (auto& d : cache.devices)
    if (d->device == device) return *d;

  require_not_capturing(stream);
  auto d = std::make_unique<PerDevice>();
  d->device = device;
  BlockMaskView v = mask.view();
  v.row_offsets = upload(d->arrays, mask.row_offsets());
  v.kv_indices = upload(d->arrays, mask.kv_indices());
  v.kv_full = upload(d->arrays, mask.kv_full());
  d->mask.blocks = v;
  if (mask.pattern()) {
    d->exprs = std::make_shared<DeviceExprs>(*mask.pattern(), stream);
    d->mask.exprs = d->exprs->exprs();
    d->mask.num_exprs = d->exprs->num_exprs();
  }
  // Pageable copies may still be in flight; later kernels can run on any stream.
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the mask upload");
  cache.devices.push_back(std::move(d));
  return *cache.devices.back();
}

}  // namespace

DeviceMaskView device_mask(const BlockMask& mask, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return per_device(mask, stream).mask;
}

void adopt_device_mask(const BlockMask& mask, const BlockMaskView& blocks,
                       std::shared_ptr<const DeviceExprs> exprs, std::shared_ptr<const void> owner) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  MaskCache& cache = mask_cache(mask);
  for (auto& d : cache.devices)
    require(d->device != device, "CUDA backend: the mask already has a copy on device ", device);
  auto d = std::make_unique<PerDevice>();
  d->device = device;
  d->mask.blocks = blocks;
  if (exprs) {
    d->mask.exprs = exprs->exprs();
    d->mask.num_exprs = exprs->num_exprs();
  }
  d->exprs = std::move(exprs);
  d->adopted = std::move(owner);
  cache.devices.push_back(std::move(d));
}

namespace {

// The cached plan of (tile, split) on this device, or null.
const TilePlanEntry* find_tile_plan(const PerDevice& d, TileShape tile, const PlanSplit& split) {
  for (const auto& e : d.tile_plans)
    if (e->tile == tile && e->split == split) return e.get();
  return nullptr;
}

// The device copy of `grain`, the mask at the granularity of `tile`, made on first use.
const TileGrainEntry& device_tile_grain(const BlockMask& mask, PerDevice& d, TileShape tile,
                                        const TileGrainMask& grain) {
  for (const auto& e : d.tile_grains)
    if (e->tile == tile) return *e;
  auto e = std::make_unique<TileGrainEntry>();
  e->tile = tile;
  e->blocks = d.mask.blocks;
  e->blocks.block_q = tile.rows;
  e->blocks.block_k = tile.cols;
  e->blocks.num_q_blocks = ceil_div(mask.q_len(), tile.rows);
  e->blocks.num_k_blocks = ceil_div(mask.k_len(), tile.cols);
  e->blocks.row_offsets = upload(e->arrays, grain.row_offsets);
  e->blocks.kv_indices = upload(e->arrays, grain.kv_indices);
  e->blocks.kv_full = upload(e->arrays, grain.kv_full);
  e->sub_present = upload(e->arrays, grain.sub_present);
  e->sub_full = upload(e->arrays, grain.sub_full);
  e->partial = upload_partial_slots(e->arrays, grain.kv_full);
  d.tile_grains.push_back(std::move(e));
  return *d.tile_grains.back();
}

// Makes, uploads and caches the plan of (tile, split) on this device.
DeviceTilePlanView make_device_tile_plan(const BlockMask& mask, PerDevice& d, TileShape tile, const PlanSplit& split) {
  std::shared_ptr<const TileGrainMask> grain = per_tile(mask_cache(mask).tile_grains, tile, [&] {
    return derive_tile_grain_mask(mask, tile, row_counts(mask, tile));
  });
  const HostTilePlan host = make_tile_plan(mask, tile, grain, split);
  auto e = std::make_unique<TilePlanEntry>();
  e->tile = tile;
  e->split = split;
  DeviceTilePlanView& view = e->view;
  view.blocks = d.mask.blocks;
  PartialSlots partial;
  if (grain) {
    const TileGrainEntry& on_device = device_tile_grain(mask, d, tile, *grain);
    view.blocks = on_device.blocks;
    view.sub_present = on_device.sub_present;
    view.sub_full = on_device.sub_full;
    partial = on_device.partial;
  } else {
    if (!d.partial) d.partial = upload_partial_slots(d.arrays, mask.kv_full());
    partial = *d.partial;
  }
  view.partial_slots = partial.slots;
  view.num_partial_entries = partial.partial;
  view.num_entries = partial.entries;
  view.sub = host.sub;
  view.items = upload(e->arrays, host.items);
  view.num_items = static_cast<int64_t>(host.items.size());
  view.band_first = upload(e->arrays, host.band_first);
  view.num_bands = static_cast<int64_t>(host.band_first.size()) - 1;
  view.max_item_entries = host.max_item_entries;
  view.min_item_entries = host.min_item_entries;
  view.total_item_entries = host.total_item_entries;
  view.split_rows = upload(e->arrays, host.split_rows);
  view.num_split_rows = static_cast<int64_t>(host.split_rows.size());
  view.num_slots = host.num_slots;
  view.num_q_tiles = ceil_div(mask.q_len(), tile.rows);
  view.num_k_tiles = ceil_div(mask.k_len(), tile.cols);
  view.tile_rows = tile.rows;
  view.tile_cols = tile.cols;
  view.tables = &d.plan_tables;
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the tile plan upload");
  d.tile_plans.push_back(std::move(e));
  return d.tile_plans.back()->view;
}

// The plan of (tile, split), made on first use; while `stream` captures a
// graph and it does not exist yet, the plain plan (which must).
DeviceTilePlanView plan_or_plain(const BlockMask& mask, TileShape tile, const PlanSplit& split, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  PerDevice& d = per_device(mask, stream);
  if (const TilePlanEntry* e = find_tile_plan(d, tile, split)) return e->view;
  if (!capturing(stream)) return make_device_tile_plan(mask, d, tile, split);
  const TilePlanEntry* plain = find_tile_plan(d, tile, PlanSplit{});
  require(plain != nullptr, kNoPlanWhileCapturing);
  return plain->view;
}

}  // namespace

bool PlanTableKey::operator==(const PlanTableKey& o) const {
  const DilatedExclusion &a = exclude, &b = o.exclude;
  return tile_rows == o.tile_rows && tile_cols == o.tile_cols && threads == o.threads &&
         warp_rows == o.warp_rows && q_heads == o.q_heads && q_len == o.q_len && k_len == o.k_len &&
         classes == o.classes && a.kind == b.kind && a.causal == b.causal && a.segment == b.segment &&
         a.rate == b.rate && a.p_lo == b.p_lo && a.p_hi == b.p_hi && a.group == b.group &&
         a.first_position == b.first_position && a.shift == b.shift && a.block_q == b.block_q &&
         a.num_q_blocks == b.num_q_blocks && a.term == b.term && a.runs == b.runs &&
         a.runs_per_head == b.runs_per_head;
}

const uint32_t* PlanTables::find_or_make(const PlanTableKey& key, int64_t words, cudaStream_t stream,
                                         const std::function<void(uint32_t*)>& make) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [made_for, table] : tables_)
    if (made_for == key) return static_cast<const uint32_t*>(table.get());
  if (capturing(stream)) return nullptr;
  std::shared_ptr<void> table(device_alloc(static_cast<size_t>(words) * 4, "cudaMalloc of a plan table"));
  make(static_cast<uint32_t*>(table.get()));
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize after making a plan table");
  tables_.emplace_back(key, table);
  return static_cast<const uint32_t*>(table.get());
}

int64_t PlanTables::size() {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(tables_.size());
}

int64_t plan_tables_made(const BlockMask& mask) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  for (auto& d : mask_cache(mask).devices)
    if (d->device == device) return d->plan_tables.size();
  return 0;
}

DeviceTilePlanView device_tile_plan(const BlockMask& mask, TileShape tile, cudaStream_t stream) {
  return plan_or_plain(mask, tile, PlanSplit{}, stream);
}

DeviceTilePlanView device_split_plan(const BlockMask& mask, TileShape tile, const PlanSplit& split,
                                     cudaStream_t stream) {
  return plan_or_plain(mask, tile, split, stream);
}

std::shared_ptr<const DilatedSplit> dilated_split(const BlockMask& mask, TileShape tile) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return per_tile(mask_cache(mask).dilated, tile, [&] { return make_dilated_split(mask, tile); });
}

int64_t plan_key_tiles(const BlockMask& mask, TileShape tile) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  return per_tile(mask_cache(mask).key_tiles, tile,
                  [&] { return tile_plan_key_tiles(mask, tile, row_counts(mask, tile)); });
}

const int32_t* device_table(const BlockMask& mask, const std::vector<int32_t>& host, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(cache_mutex());
  PerDevice& d = per_device(mask, stream);
  auto found = d.tables.find(host.data());
  if (found != d.tables.end()) return found->second;
  require_not_capturing(stream);
  const int32_t* device = upload(d.arrays, host);
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after a table upload");
  d.tables[host.data()] = device;
  return device;
}

}  // namespace spattn::cuda_detail
