// cuda/plan/device_plan.hpp - the mask's device copy, made once and cached.
//
// The first call for a (mask, device) copies the BlockMask arrays and the
// pattern's expressions and tables to the device; the first call for a
// (mask, device, tile shape) also derives and copies the tile plan (and the
// first call that needs it, a plan whose rows split otherwise,
// device_split_plan; plans of one tile share the tile-granularity arrays of
// masks whose blocks are smaller than the tile). All live
// in the mask's device_cache() slot and are freed with the last copy of the
// mask. Later calls only look them up: no allocation, no copy, no host
// synchronisation, so an attention call can be captured in a CUDA graph once
// the plan exists (create it first with prepare, outside the capture). A mask
// built on the device (cuda_build_mask) is adopted instead of copied.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "cuda/common/fwd_params.hpp"
#include "cuda/plan/device_exprs.hpp"
#include "cuda/plan/device_plan_view.hpp"
#include "cuda/plan/dilated_split.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

// The mask on the current device. Throws spattn::Error if it must be created
// while `stream` is capturing a graph.
DeviceMaskView device_mask(const BlockMask& mask, cudaStream_t stream);

// Makes `blocks` (device pointers to `mask`'s arrays, built on the current
// device) and `exprs` the mask's copy on this device; `owner` keeps the arrays
// alive as long as the mask. The mask must have no copy there yet.
void adopt_device_mask(const BlockMask& mask, const BlockMaskView& blocks,
                       std::shared_ptr<const DeviceExprs> exprs, std::shared_ptr<const void> owner);

// The tile plan of `tile` on the current device (same rules as device_mask).
DeviceTilePlanView device_tile_plan(const BlockMask& mask, TileShape tile, cudaStream_t stream);

// The tile plan of `tile` whose rows split as `split` asks (make_tile_plan:
// into more pieces to fill the device, fewer to keep long rows whole, or a
// grid's last round spread; tile_plan.hpp), kept with the mask beside the
// plain one (one per split asked for). While `stream` captures a graph and
// this plan does not exist yet, the plain plan (which must, as for
// device_tile_plan): the same results up to rounding (a row split otherwise
// merges its pieces in another order), on fewer multiprocessors or with a
// longer last round.
DeviceTilePlanView device_split_plan(const BlockMask& mask, TileShape tile, const PlanSplit& split,
                                     cudaStream_t stream);

// The mask's dilated split for a kernel of tile `tile` (dilated_split.hpp),
// made on first use on the host and kept with the mask (one per tile); null
// when the pattern has none.
std::shared_ptr<const DilatedSplit> dilated_split(const BlockMask& mask, TileShape tile);

// tile_plan_key_tiles(mask, tile), counted on first use and kept with the mask.
int64_t plan_key_tiles(const BlockMask& mask, TileShape tile);

// What a table kept with a mask's plans (PlanTables) was made for beside
// the mask: the kernel tile it serves (its rows and keys, the threads
// holding a tile and the rows of each warp) and the call's fields it reads.
// The plans of one tile (whatever their rows' splits) share their entries,
// so they share the table.
struct PlanTableKey {
  int64_t tile_rows = 0, tile_cols = 0, threads = 0, warp_rows = 0;
  int64_t q_heads = 0, q_len = 0, k_len = 0;
  int32_t classes = 0;
  DilatedExclusion exclude;
  bool operator==(const PlanTableKey& o) const;
};

// Device tables made from a mask's plans for a kind of call (the keep bits
// of common/keep_bits_table.cuh), one set per device, kept as long as the
// mask's device copy.
class PlanTables {
 public:
  // The table of `words` 32-bit words under `key`, made on first use by
  // `make` (which queues its work on `stream`; waited for here, so that
  // calls on any stream may read it); null where it does not exist yet and
  // `stream` captures a graph.
  const uint32_t* find_or_make(const PlanTableKey& key, int64_t words, cudaStream_t stream,
                               const std::function<void(uint32_t*)>& make);
  // The tables made so far.
  int64_t size();

 private:
  std::mutex mutex_;
  std::vector<std::pair<PlanTableKey, std::shared_ptr<void>>> tables_;
};

// The tables kept with `mask`'s plans on the current device (0 before its
// first call there).
int64_t plan_tables_made(const BlockMask& mask);

// A table belonging to `mask`'s plan (`host` must live as long as the mask,
// e.g. inside its dilated split) on the current device, copied once.
const int32_t* device_table(const BlockMask& mask, const std::vector<int32_t>& host, cudaStream_t stream);

}  // namespace spattn::cuda_detail
