// cuda/kernel_choice.hpp - which fused kernel runs a call, and its tile: the
// one decision shared by the planner (plan/cuda_plan.cpp) and dynamic
// attention (select/dynamic_attention.cu). The process-wide switches below
// make cached plans be made again (plan_generation).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cuda/plan/mask_facts.hpp"
#include "cuda/plan/tile_plan.hpp"
#include "spattn/block_mask.hpp"

namespace spattn::cuda_detail {

// Whether the Hopper (sm90) kernel runs a call with head dim `head_dim`:
// the kernel choice (SPATTN_CUDA_KERNEL or cuda_set_kernel) allows it, the
// device has compute capability 9.0, the build has the kernel for this head
// dim, and `tile_fits` (the call's mask blocks suit the sm90 tile). Where the
// choice forces sm90 and one of these fails it throws spattn::Error naming
// `caller` and the reason; for the tile, `explain_misfit` throws it.
bool choose_sm90(const std::string& caller, int64_t head_dim, bool tile_fits,
                 const std::function<void()>& explain_misfit);

// The base tile of a kernel: the sm90 kernel's for the head dim
// (sm90_tile), or the sm80 kernel's for the head dim and whether the call
// takes its wide tile (`sm80_wide`). Dynamic attention runs it.
TileShape kernel_tile(bool sm90, int64_t head_dim, bool sm80_wide);

// Whether the sm80 kernel runs a call on `mask` at `head_dim` (one of
// sm80_wide_head_dim) on its wide tile (fwd_sm80.hpp): the blocks fit it,
// where the call makes dilated splits (`dilated_splits`) the mask has none,
// and the narrow tile's plan computes more than 90% (D = 64) or 80% (D = 32)
// of the wide tile's pairs (MaskFacts::key_tiles; BigBird and random blocks of
// 64 fill 128-key tiles poorly), unless force_sm80_wide_tile says otherwise.
bool sm80_wide_tile(int64_t head_dim, MaskFacts& facts, bool dilated_splits);

// Whether the mask's blocks fit a tile the sm90 kernel runs at `head_dim`
// (its own, sm90_tile, or the narrow or small one where the head dim has it;
// not the small one for a call whose query heads are packed into the rows of
// a tile, `packed_heads`, as call_tile).
bool sm90_tile_fits(int64_t head_dim, const BlockMask& mask, bool packed_heads);

// The tile an attention call on `mask` runs (its plan is made for it). The
// sm80 kernel: kernel_tile with sm80_wide_tile. The sm90 kernel: its own
// tile (sm90_tile) where the call makes dilated splits (`dilated_splits`)
// and the mask has one on the wide tile (both passes run there); else, at
// head dims with optional tiles (fwd_sm90.hpp), the tile among those the
// blocks fit (the tall one only where the wide one fits too; the small one
// never for a call whose query heads are packed into the rows of a tile,
// `packed_heads`: they take up to kMaxPackedRows rows) whose plan computes
// the fewest pairs over its speed per pair against the wide tile (tall
// 1.05; narrow 0.65 at D = 64 and 0.8 at D = 128; small 0.65 and 0.7), ties
// to the tall, small, narrow tile in that order; pairs counted on the host
// once per plan (MaskFacts::key_tiles). The force_* switches below override it.
TileShape call_tile(bool sm90, int64_t head_dim, MaskFacts& facts, bool dilated_splits, bool packed_heads = false);

// The query heads per kv head a call on `mask` (validated against its
// tensors) packs into the rows of one tile (PackedHeads in fwd_params.hpp), or 1
// for none: the call has grouped query heads (G = q_heads / kv_heads of at
// least 2), its query positions times G fit one tile's rows
// (kMaxPackedRows: a decoding step, a few speculative tokens), and those
// query heads share the mask: its heads divide the kv heads (one mask head,
// say; a head-dependent pattern, whose predicate reads the query head, has
// one per query head and never packs). The kv head's keys and values are
// then read once for all its query heads, and a tile computes G times as
// many rows.
constexpr int64_t kMaxPackedRows = 128;  // the smallest tile height calls with packed heads take
int64_t packed_query_heads(int64_t q_len, int64_t q_heads, int64_t kv_heads, const BlockMask& mask);

// Forces the sm90 tall-tile choice of call_tile: true takes the tall tile
// wherever the blocks fit it and the call makes no dilated split of the mask,
// false never, nullopt compares the plans again (where several options are
// forced on, the first of tall, small and narrow is taken). Returns the
// setting before. Process-wide; for tests that run every path on each
// kernel.
std::optional<bool> force_sm90_tall_tile(std::optional<bool> tall);

// The same for the sm90 narrow-tile choice of call_tile (true: wherever the
// blocks fit both tiles and the call makes no dilated split of the mask on
// the wide one; false leaves it to masks whose blocks the wide tile does not
// fit).
std::optional<bool> force_sm90_narrow_tile(std::optional<bool> narrow);

// The same for the sm90 small-tile choice of call_tile (true: wherever the
// blocks fit it and the call makes no dilated split of the mask on the wide
// tile).
std::optional<bool> force_sm90_small_tile(std::optional<bool> small);

// The same for the sm80 wide-tile choice (sm80_wide_tile; true: wherever the
// blocks fit it and the call makes no dilated split of the mask).
std::optional<bool> force_sm80_wide_tile(std::optional<bool> wide);

}  // namespace spattn::cuda_detail
