// cuda/plan/cuda_plan.cpp - the CUDA planner: every decision about a call's
// work on the device, made once per call shape (see cuda_plan.hpp).
//
// In order: the query heads packed into a tile's rows, the kernel (sm90 or
// sm80) and its tile, the dilated split, the split of each pass's rows, then
// the uploads (the mask's shared device copy, a dilated split's own masks,
// the tile plans) and each pass's table of keep bits. The launch adds the
// call's tensors and runs the passes (cuda_backend.cpp).
#include "cuda/plan/cuda_plan.hpp"

#include <algorithm>
#include <sstream>
#include <utility>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/keep_bit_classes.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/plan/dilated_split.hpp"
#include "cuda/plan/mask_facts.hpp"
#include "cuda/plan/tile_plan_upload.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn::cuda_detail {
namespace {

using pattern_math::ceil_div;

// Makes `device` current for the scope.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    check_cuda(cudaGetDevice(&before_), "cudaGetDevice");
    if (before_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice to the plan's device");
  }
  ~DeviceScope() { cudaSetDevice(before_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int before_ = 0;
};

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(cudaStreamIsCapturing(stream, &status), "cudaStreamIsCapturing");
  return status != cudaStreamCaptureStatusNone;
}

// The kernel arguments of a call of `shape` without its tensors (a varlen
// batch's lengths are the mask's).
FwdParams shape_params(const CallShape& shape, const BlockMask& mask) {
  FwdParams p;
  p.batch = shape.batch;
  p.q_heads = shape.q_heads;
  p.kv_heads = shape.kv_heads;
  p.q_len = shape.varlen ? mask.q_len() : shape.q_len;
  p.k_len = shape.varlen ? mask.k_len() : shape.k_len;
  p.head_dim = shape.head_dim;
  return p;
}

// Whether the Hopper kernel runs the call (choose_sm90 with the mask's fit).
bool use_sm90(int64_t head_dim, const BlockMask& mask, bool packed_heads) {
  return choose_sm90("CUDA backend", head_dim, sm90_tile_fits(head_dim, mask, packed_heads),
                     [&] { check_tile_fit(mask, sm90_tile(head_dim)); });
}

// Every item of the plan has the same number of entries, within one (a
// dense mask's rows, the pieces of a fill split).
bool items_of_equal_length(const HostTilePlan& plan) {
  return plan.min_item_entries > 0 && plan.max_item_entries - plan.min_item_entries <= 1;
}

// The tile plan of a call `p` (shape only, query heads packed) on the mask of
// `facts` and `tile`: the plain plan, or one whose rows split as a PlanSplit
// asks:
// - where its rows (mask heads x query tiles) times the call's copies (batch
//   x query heads per mask head) are fewer work units than the kernel runs
//   at a time on the device (a call of few query tiles and heads, as in
//   decoding, would leave most multiprocessors idle), the plan that splits
//   its rows into two units per multiprocessor (min_items; the pieces merge
//   as split rows do). Two per multiprocessor ran fastest on both kernels
//   (H100, 1 x 128K keys): the sm90 kernel's one CTA per multiprocessor
//   takes two units in turn, and the sm80 kernel's two CTAs take one each
//   (as the two CTAs per multiprocessor of the sm90 kernel's small tile do);
// - where the plain plan splits rows, the plan that keeps whole every row no
//   longer than the call's key tiles per running CTA (whole_row_tiles,
//   rounded down to a power of two, so that calls of similar size share a
//   plan): started first, such a row ends no later than the others, and
//   needs no partial results and no merge, which cost BigBird's split
//   global rows about 4% (H100); the plain plan where that share is no
//   longer than the pieces it splits rows into anyway;
// - where it splits none and its rows are as long as each other (dense
//   attention), the plan that spreads the grid's last round over every
//   running CTA (tail_split), unless the units divide evenly;
// - the plain plan for varlen batches (whose sequences may be far shorter
//   than the mask) and for unequal rows that need no split.
HostTilePlan call_tile_plan(const FwdParams& p, bool varlen, MaskFacts& facts, TileShape tile, bool sm90) {
  const BlockMask& mask = facts.mask();
  const std::shared_ptr<const TileGrainMask> grain = facts.tile_grain(tile);
  const auto plan_of = [&](const PlanSplit& split) { return make_tile_plan(mask, tile, grain, split); };
  const int64_t copies = p.batch * (p.q_heads / mask.num_heads());
  const int64_t rows = mask.num_heads() * ceil_div(mask.q_len(), tile.rows);
  const int64_t sms = current_device_info().sms;
  const int64_t resident = sms * (sm90 ? sm90_ctas_per_sm(tile) : sm80_ctas_per_sm(p.head_dim));
  if (copies == 0) return plan_of(PlanSplit{});
  if (rows * copies >= resident) {
    HostTilePlan plain = plan_of(PlanSplit{});
    if (varlen) return plain;
    const int64_t key_tiles = facts.key_tiles(tile);
    if (plain.split_rows.empty()) {
      if (!items_of_equal_length(plain)) return plain;
      const PlanSplit tail = tail_split(rows, key_tiles / rows, copies, resident);
      return tail.tail_rows > 0 ? plan_of(tail) : plain;
    }
    PlanSplit whole;
    whole.whole_row_tiles = 1;
    while (2 * whole.whole_row_tiles <= key_tiles * copies / resident) whole.whole_row_tiles *= 2;
    if (whole.whole_row_tiles <= split_piece_tiles(key_tiles, rows)) return plain;
    return plan_of(whole);
  }
  // A tile's rows with queries (positions x packed heads): few of them make short pieces pay.
  PlanSplit fill;
  fill.min_items = ceil_div(2 * sms, copies);
  fill.min_piece_tiles = min_fill_piece_tiles(std::min(p.q_len, tile.rows), tile);
  return plan_of(fill);
}

// The dilated split a call with `q_heads` query heads runs on `tile`, if any
// (the mask's split is per query head), with the permuted pass's plain plan
// in `permuted_plan`. That pass merges each row into the rest's result as it
// writes it, which the pieces of a split row cannot; its rows (one group's
// keys, causal or not, in block-diagonal groups) stay within twice the
// average row, so its plans do not split them, and a call whose permuted
// plan did would run without the permutation.
std::shared_ptr<const DilatedSplit> call_split(MaskFacts& facts, TileShape tile, int64_t q_heads,
                                               HostTilePlan& permuted_plan) {
  std::shared_ptr<const DilatedSplit> split = facts.dilated_split(tile);
  if (!split || split->query_heads != q_heads) return nullptr;
  permuted_plan = make_tile_plan(split->permuted, tile);
  if (!permuted_plan.split_rows.empty()) return nullptr;
  return split;
}

// Adds the pass of kernel arguments `call` (shape only) on `pass_mask`, whose
// device copy is `on_device`, with tile plan `host` and exclusion `exclude`,
// to `plan`: the tile plan uploaded and the table of keep bits made.
void add_pass(CudaPlan& plan, const FwdParams& call, bool varlen, const BlockMask& pass_mask,
              const DeviceMaskView& on_device, const HostTilePlan& host, const DilatedExclusion& exclude,
              DType dtype, cudaStream_t stream) {
  KernelPass pass;
  pass.mask = on_device;
  pass.plan = upload_tile_plan(pass_mask, on_device, plan.tile, host, plan.arrays, stream);
  pass.exclude = exclude;
  FwdParams p = pass_params(pass, call);
  // Varlen batches make no table: their sequences' bits differ.
  p.keep_bits.classes = varlen ? 0 : keep_bit_classes(p, pass_mask);
  DevicePtr table = plan.sm90 ? make_fwd_sm90_keep_bits(p, dtype, stream) : make_fwd_sm80_keep_bits(p, dtype, stream);
  if (table) plan.arrays.push_back(std::move(table));
  pass.keep_bits = p.keep_bits;
  plan.passes.push_back(pass);
}

// `t` from row `row` on (its data moved forward by `elem`-byte elements;
// strides unchanged); a tensor without data (a plan's shape-only arguments)
// stays without.
TensorArg from_row(TensorArg t, int64_t row, int64_t elem) {
  if (t.data != nullptr) t.data = static_cast<char*>(t.data) + row * t.stride_l * elem;
  return t;
}

}  // namespace

FwdParams pass_params(const KernelPass& pass, FwdParams call) {
  call.mask = pass.mask;
  call.plan = pass.plan;
  call.exclude = pass.exclude;
  call.keep_bits = pass.keep_bits;
  return call;
}

FwdParams permuted_params(const CudaPlan& plan, const FwdParams& call, const FwdParams& rest, int64_t element_bytes,
                          int64_t out_element_bytes) {
  const PermutedPass& pass = plan.permuted;
  FwdParams perm = pass_params(plan.passes[1], call);
  const int64_t shift = call.k_len - call.q_len;  // query row i sits at position i + shift
  const int64_t q_first = pass.first_position - shift;  // the query row at the first regular position
  perm.q_len = perm.k_len = pass.length;
  perm.q = from_row(call.q, q_first, element_bytes);
  perm.k = from_row(call.k, pass.first_position, element_bytes);
  perm.v = from_row(call.v, pass.first_position, element_bytes);
  perm.out = from_row(call.out, q_first, out_element_bytes);
  perm.residue_rate = pass.rate;
  perm.lse = rest.lse != nullptr ? rest.lse + q_first * rest.lse_stride_l : nullptr;
  perm.lse_stride_b = rest.lse_stride_b;
  perm.lse_stride_h = rest.lse_stride_h;
  perm.lse_stride_l = rest.lse_stride_l;
  perm.merge_into_out = true;
  perm.rest_keeps_blocks = pass.rest_keeps_blocks;
  return perm;
}

std::shared_ptr<const CudaPlan> make_cuda_plan(const BlockMask& mask, const CallShape& shape, int device,
                                               void* stream, bool backward) {
  require(device >= 0, "CUDA backend: a plan needs a device, got device ", device);
  const DeviceScope scope(device);
  const auto s = static_cast<cudaStream_t>(stream);
  require(!capturing(s), "CUDA backend: the call (", shape.describe(), ") has no plan yet and the stream is "
          "capturing a CUDA graph; make its plan before the capture (spattn::make_plan, or one call of this "
          "shape outside the capture)");
  // Split rows and the sm90 kernel's work counter take stream-ordered
  // scratch from the pool, which must exist before any capture.
  scratch_pool();
  auto plan = std::make_shared<CudaPlan>();
  plan->device = device;
  // A call with no row to write or no key to read launches no kernel
  // (attention() writes rows without keys itself).
  if (shape.batch == 0 || shape.q_heads == 0 || mask.q_len() == 0 || mask.k_len() == 0) return plan;
  MaskFacts facts(mask);
  FwdParams call = shape_params(shape, mask);

  const int64_t pack = shape.varlen ? 1 : packed_query_heads(shape.q_len, shape.q_heads, shape.kv_heads, mask);
  if (pack > 1) {
    plan->packing = shape.q_len == 1 ? HeadPacking::InPlace : HeadPacking::Copies;
    plan->pack = pack;
    call.q_heads /= pack;
    call.q_len *= pack;
    call.packed = PackedHeads{static_cast<int32_t>(pack)};
  }
  plan->sm90 = use_sm90(shape.head_dim, mask, call.packed.any());
  if (!plan->sm90) {
    check_fwd_sm80_head_dim(shape.head_dim);
    check_tile_fit(mask, kSm80NarrowTile);
  }
  // A dilated split's full runs depend on the tile (dilated_split.hpp), so
  // it is made for the chosen kernel; varlen batches make none.
  plan->tile = call_tile(plan->sm90, shape.head_dim, facts, !shape.varlen, call.packed.any());
  HostTilePlan permuted_plan;
  const std::shared_ptr<const DilatedSplit> split =
      shape.varlen ? nullptr : call_split(facts, plan->tile, call.q_heads, permuted_plan);

  if (!split) {
    plan->masks.push_back(shared_device_copy(mask, s));
    const HostTilePlan host = call_tile_plan(call, shape.varlen, facts, plan->tile, plan->sm90);
    add_pass(*plan, call, shape.varlen, mask, plan->masks.back()->view(), host, DilatedExclusion{}, shape.dtype, s);
  } else {
    // The rest of the pattern into out and the LSE, then block-diagonal
    // attention over the (segment, residue) groups (less the rest's full
    // runs), which reads the groups' rows of q, k and v in place and merges
    // each row into out and the LSE as it writes it; both on the kernel the
    // split was made for, on plain plans.
    plan->masks.push_back(std::make_shared<const DeviceMaskCopy>(split->rest, s));
    add_pass(*plan, call, false, split->rest, plan->masks.back()->view(), make_tile_plan(split->rest, plan->tile),
             rest_exclusion(*split), shape.dtype, s);
    plan->masks.push_back(std::make_shared<const DeviceMaskCopy>(split->permuted, s));
    const int32_t* runs = upload(plan->arrays, split->full_runs, s);
    plan->permuted.rate = split->rate;
    plan->permuted.first_position = split->first_position;
    plan->permuted.length = split->num_segments * split->group;
    plan->permuted.rest_keeps_blocks = split->rest.num_blocks() > 0;
    FwdParams perm = call;
    perm.q_len = perm.k_len = plan->permuted.length;
    perm.residue_rate = split->rate;
    add_pass(*plan, perm, false, split->permuted, plan->masks.back()->view(), permuted_plan,
             permuted_exclusion(*split, call.q_len, call.k_len, runs), shape.dtype, s);
  }
  if (backward) {
    check_backward_mask(mask);
    plan->backward = std::make_unique<const BackwardPlan>(make_backward_plan(mask, s));
  }
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize after making the plan");
  return plan;
}

std::string describe(const CudaPlan& plan) {
  if (plan.passes.empty()) return "cuda, nothing to launch (an empty call)";
  std::ostringstream s;
  s << "cuda " << (plan.sm90 ? "sm90" : "sm80") << ", tile " << plan.tile.rows << "x" << plan.tile.cols;
  if (plan.packing != HeadPacking::None)
    s << ", " << plan.pack << " query heads per tile row group ("
      << (plan.packing == HeadPacking::InPlace ? "in place" : "copies") << ")";
  if (plan.passes.size() == 2) s << ", dilated split (rate " << plan.permuted.rate << ")";
  const DeviceTilePlanView& first = plan.passes.front().plan;
  s << ", " << first.num_items << " items, " << first.num_split_rows << " split rows";
  if (plan.passes.front().keep_bits.words != nullptr) s << ", keep-bits table";
  if (plan.backward) s << ", backward lists";
  return s.str();
}

}  // namespace spattn::cuda_detail
