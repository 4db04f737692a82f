// cuda/kernel_choice.cpp - which fused kernel runs a call and its tile
// (kernel_choice.hpp), and the public choice (spattn/cuda.hpp:
// cuda_set_kernel, cuda_kernel, cuda_sm90_kernel_available), initialised
// from SPATTN_CUDA_KERNEL.
#include "cuda/kernel_choice.hpp"

#include <atomic>
#include <cstdlib>

#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/plan/mask_facts.hpp"
#include "plan/plan_state.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern.hpp"

namespace spattn {
namespace {

CudaKernel parse_kernel_variable() {
  const char* value = std::getenv("SPATTN_CUDA_KERNEL");
  const std::string v = value ? value : "auto";
  if (v == "auto" || v.empty()) return CudaKernel::Auto;
  if (v == "sm80") return CudaKernel::Sm80;
  if (v == "sm90") return CudaKernel::Sm90;
  fail("SPATTN_CUDA_KERNEL must be auto, sm80 or sm90, got '", v, "'");
}

// The current choice; initialised from SPATTN_CUDA_KERNEL on first use (a bad
// value throws then, and again on every later use until it is overridden).
std::atomic<int>& kernel_choice() {
  static std::atomic<int> choice{-1};
  return choice;
}

}  // namespace

void cuda_set_kernel(CudaKernel kernel) {
  kernel_choice().store(static_cast<int>(kernel));
  detail::invalidate_cached_plans();  // cached plans hold the kernel they were made for
}

CudaKernel cuda_kernel() {
  int c = kernel_choice().load();
  if (c < 0) {
    c = static_cast<int>(parse_kernel_variable());
    kernel_choice().store(c);
  }
  return static_cast<CudaKernel>(c);
}

bool cuda_sm90_kernel_available() { return cuda_detail::fwd_sm90_available(); }

namespace cuda_detail {

int64_t packed_query_heads(int64_t q_len, int64_t q_heads, int64_t kv_heads, const BlockMask& mask) {
  if (q_len < 1 || kv_heads <= 0 || q_heads % kv_heads != 0) return 1;
  const int64_t group = q_heads / kv_heads;
  const bool shared = kv_heads % mask.num_heads() == 0 && !(mask.pattern() && mask.pattern()->head_dependent());
  return group >= 2 && q_len * group <= kMaxPackedRows && shared ? group : 1;
}

bool choose_sm90(const std::string& caller, int64_t head_dim, bool tile_fits,
                 const std::function<void()>& explain_misfit) {
  const CudaKernel choice = cuda_kernel();
  if (choice == CudaKernel::Sm80) return false;
  const bool forced = choice == CudaKernel::Sm90;
  if (!fwd_sm90_available()) {
    require(!forced, caller, ": the sm90 kernel (SPATTN_CUDA_KERNEL=sm90) needs a device of compute "
            "capability 9.0 and a build for CUDA architecture 90");
    return false;
  }
  if (!fwd_sm90_supports_head_dim(head_dim)) {
    require(!forced, caller, ": the sm90 kernel's head_dim must be one of ", fwd_sm90_head_dims(),
            " in this build, got ", head_dim);
    return false;
  }
  if (forced && !tile_fits) {
    explain_misfit();
    fail(caller, ": the mask blocks do not fit the sm90 kernel's tile at head_dim ", head_dim);
  }
  return tile_fits;
}

TileShape kernel_tile(bool sm90, int64_t head_dim, bool sm80_wide) {
  return sm90 ? sm90_tile(head_dim) : sm80_tile(head_dim, sm80_wide);
}

namespace {

// Pairs the plan of `tile` computes: its key tiles times the tile's pairs.
double plan_pairs(MaskFacts& facts, TileShape tile) {
  return static_cast<double>(facts.key_tiles(tile)) * static_cast<double>(tile.rows * tile.cols);
}

// The speed per computed pair of the sm80 kernel's narrow tile against its
// wide tile, a margin below the measured one: it ran dense 5% slower at
// D = 64 and 15% slower at D = 32 (same-run A/B on an H200).
constexpr double sm80_narrow_tile_speed(int64_t head_dim) { return head_dim <= 32 ? 0.8 : 0.9; }

// The speed per computed pair of the sm90 kernel's optional tiles against
// its wide tile, each a margin below the measured one (same-run A/Bs):
// the tall tile ran 7-10% faster on equal work at D = 64 (H100); the narrow
// tile ran dense 20% slower than the wide tile at D = 128 and 31% slower
// than the tall tile at D = 64; the small tile 24% slower than the wide
// tile at D = 128 and 27% slower than the tall tile at D = 64 (H200).
constexpr double kTallTileSpeed = 1.05;
constexpr double narrow_tile_speed(int64_t head_dim) { return head_dim <= 64 ? 0.65 : 0.8; }
constexpr double small_tile_speed(int64_t head_dim) { return head_dim <= 64 ? 0.65 : 0.7; }

// A forced tile choice (force_sm90_tall_tile, force_sm90_narrow_tile,
// force_sm90_small_tile, force_sm80_wide_tile): -1 none, 0 never, 1 wherever
// it fits.
std::atomic<int>& forced_tall_tile() {
  static std::atomic<int> forced{-1};
  return forced;
}
std::atomic<int>& forced_narrow_tile() {
  static std::atomic<int> forced{-1};
  return forced;
}
std::atomic<int>& forced_small_tile() {
  static std::atomic<int> forced{-1};
  return forced;
}
std::atomic<int>& forced_sm80_wide_tile() {
  static std::atomic<int> forced{-1};
  return forced;
}
std::optional<bool> exchange_forced(std::atomic<int>& forced, std::optional<bool> value) {
  const int before = forced.exchange(value ? static_cast<int>(*value) : -1);
  detail::invalidate_cached_plans();  // cached plans hold the tile they were made for
  return before < 0 ? std::nullopt : std::optional<bool>(before == 1);
}

// Whether the small tile takes the mask's blocks: they fit it, and are at
// least 16 on each side (blocks of 8 would split it into 8 x 8 sub-blocks,
// which no other tile has and its tests do not cover).
bool small_tile_fits(const BlockMask& mask) {
  return tile_fits(mask, kSm90SmallTile) && mask.block_q() >= 16 && mask.block_k() >= 16;
}

// The sm90 kernel's tile for a call at a head dim with optional tiles that
// makes no dilated split on the wide tile: the first option (tall, small,
// narrow, in that order) forced on where the call may take it, else the
// option whose plan computes the fewest pairs over its speed per pair, ties
// to the earlier one, the wide tile last. An option forced off is never
// taken, but for the narrow tile where the wide one does not fit.
TileShape sm90_option_tile(int64_t head_dim, MaskFacts& facts, bool packed_heads) {
  const BlockMask& mask = facts.mask();
  const bool wide_fits = tile_fits(mask, kSm90WideTile);
  const int narrow_forced = forced_narrow_tile().load();
  struct Option {
    TileShape tile;
    bool eligible;
    double speed;
    int forced;
  };
  const Option options[] = {
      {kSm90TallTile, sm90_tall_head_dim(head_dim) && wide_fits && tile_fits(mask, kSm90TallTile), kTallTileSpeed,
       forced_tall_tile().load()},
      {kSm90SmallTile, sm90_small_head_dim(head_dim) && !packed_heads && small_tile_fits(mask),
       small_tile_speed(head_dim), forced_small_tile().load()},
      {kSm90NarrowTile, sm90_narrow_option_head_dim(head_dim) && tile_fits(mask, kSm90NarrowTile),
       narrow_tile_speed(head_dim), wide_fits || narrow_forced != 0 ? narrow_forced : -1},
      {kSm90WideTile, wide_fits, 1.0, -1}};
  for (const Option& option : options)
    if (option.eligible && option.forced == 1) return option.tile;
  const Option* best = nullptr;
  double best_cost = 0;
  for (const Option& option : options) {
    if (!option.eligible || option.forced == 0) continue;
    const double cost = plan_pairs(facts, option.tile) / option.speed;
    if (best == nullptr || cost < best_cost) {
      best = &option;
      best_cost = cost;
    }
  }
  return best != nullptr ? best->tile : kSm90WideTile;
}

}  // namespace

// The dilated split's permuted pass masks every tile: on the sm80 kernel's
// wide tile that ran 4-6% slower (same-run on an H100 at D = 64, when the
// pass still read gathered copies). Varlen batches run dilated patterns
// without a split.
bool sm80_wide_tile(int64_t head_dim, MaskFacts& facts, bool dilated_splits) {
  const int forced = forced_sm80_wide_tile().load();
  if (forced == 0 || !tile_fits(facts.mask(), kSm80WideTile) ||
      (dilated_splits && facts.dilated_split(kSm80NarrowTile)))
    return false;
  if (forced == 1) return true;
  return plan_pairs(facts, kSm80NarrowTile) > sm80_narrow_tile_speed(head_dim) * plan_pairs(facts, kSm80WideTile);
}

bool sm90_tile_fits(int64_t head_dim, const BlockMask& mask, bool packed_heads) {
  return tile_fits(mask, sm90_tile(head_dim)) ||
         (sm90_narrow_option_head_dim(head_dim) && tile_fits(mask, kSm90NarrowTile)) ||
         (sm90_small_head_dim(head_dim) && !packed_heads && small_tile_fits(mask));
}

std::optional<bool> force_sm90_tall_tile(std::optional<bool> tall) {
  return exchange_forced(forced_tall_tile(), tall);
}

std::optional<bool> force_sm90_narrow_tile(std::optional<bool> narrow) {
  return exchange_forced(forced_narrow_tile(), narrow);
}

std::optional<bool> force_sm90_small_tile(std::optional<bool> small) {
  return exchange_forced(forced_small_tile(), small);
}

std::optional<bool> force_sm80_wide_tile(std::optional<bool> wide) {
  return exchange_forced(forced_sm80_wide_tile(), wide);
}

TileShape call_tile(bool sm90, int64_t head_dim, MaskFacts& facts, bool dilated_splits, bool packed_heads) {
  const BlockMask& mask = facts.mask();
  if (!sm90)
    return kernel_tile(false, head_dim, sm80_wide_head_dim(head_dim) && sm80_wide_tile(head_dim, facts, dilated_splits));
  const bool options =
      sm90_tall_head_dim(head_dim) || sm90_small_head_dim(head_dim) || sm90_narrow_option_head_dim(head_dim);
  // Both passes of a dilated split run on the split made for the kernel's own tile.
  if (!options || (dilated_splits && tile_fits(mask, kSm90WideTile) && facts.dilated_split(kSm90WideTile)))
    return sm90_tile(head_dim);
  return sm90_option_tile(head_dim, facts, packed_heads);
}

}  // namespace cuda_detail
}  // namespace spattn
