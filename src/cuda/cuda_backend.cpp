// cuda/cuda_backend.cpp - the CUDA backend's entry points (spattn/cuda.hpp):
// input checks specific to the GPU kernels, kernel arguments from the tensor
// views, the mask's device plans, and the launch.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_info.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/keep_bit_classes.hpp"
#include "cuda/common/packed_rows.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/work_units.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/kernel_choice.hpp"
#include "cuda/naive/naive_attention.hpp"
#include "cuda/plan/device_plan.hpp"
#include "cuda/select/dynamic_attention.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/pattern_terms.hpp"

namespace spattn {
namespace {

using cuda_detail::check_cuda;

constexpr double kLog2e = 1.4426950408889634;

// Unit stride along D, other strides and the base aligned to `align_elems` elements.
void check_layout(const TensorView& t, const char* name, int64_t align_elems) {
  require(t.stride[3] == 1, "CUDA backend: ", name, " must have unit stride along head_dim, got ",
          t.stride[3]);
  for (int axis = 0; axis < 3; ++axis)
    require(t.shape[axis] == 1 || t.stride[axis] % align_elems == 0, "CUDA backend: ", name,
            " strides must be multiples of ", align_elems, " elements, got stride ", t.stride[axis],
            " on axis ", axis);
  const int64_t align_bytes = align_elems * dtype_size(t.dtype);
  require(reinterpret_cast<uintptr_t>(t.data) % static_cast<uintptr_t>(align_bytes) == 0,
          "CUDA backend: ", name, " must be ", align_bytes, "-byte aligned");
  require(cuda_is_device_pointer(t.data), "CUDA backend: ", name, " must point to device memory");
}

cuda_detail::TensorArg tensor_arg(const TensorView& t) {
  return cuda_detail::TensorArg{t.data, t.stride[0], t.stride[1], t.stride[2]};
}

// The kernel arguments of tensors already validated against each other.
cuda_detail::FwdParams kernel_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                     const TensorView& out, double scale, const TensorView* lse) {
  require(q.dtype == DType::F16 || q.dtype == DType::BF16, "CUDA backend: q dtype must be fp16 or bf16, got ",
          dtype_name(q.dtype));
  require(out.dtype == q.dtype || out.dtype == DType::F32, "CUDA backend: out dtype must be ",
          dtype_name(q.dtype), " or fp32, got ", dtype_name(out.dtype));
  require(std::isfinite(scale) && scale > 0, "CUDA backend: scale must be finite and > 0, got ", scale);
  check_layout(q, "q", 8);
  check_layout(k, "k", 8);
  check_layout(v, "v", 8);
  check_layout(out, "out", 2);
  if (lse) require(cuda_is_device_pointer(lse->data), "CUDA backend: lse must point to device memory");

  cuda_detail::FwdParams p;
  p.q = tensor_arg(q);
  p.k = tensor_arg(k);
  p.v = tensor_arg(v);
  p.out = tensor_arg(out);
  p.out_f32 = out.dtype == DType::F32;
  if (lse) {
    p.lse = static_cast<float*>(lse->data);
    p.lse_stride_b = lse->stride[0];
    p.lse_stride_h = lse->stride[1];
    p.lse_stride_l = lse->stride[2];
  }
  p.batch = q.batch();
  p.q_heads = q.heads();
  p.kv_heads = k.heads();
  p.q_len = q.seq_len();
  p.k_len = k.seq_len();
  p.head_dim = q.head_dim();
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * kLog2e);
  return p;
}

cuda_detail::FwdParams make_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const BlockMask& mask, double scale,
                                   const TensorView* lse) {
  validate_attention(q, k, v, out, mask, lse);
  return kernel_params(q, k, v, out, scale, lse);
}

// The kernel arguments of a validated call `p` with one query position
// whose query heads run `pack` to a kv head as the rows of one tile
// (PackedHeads): q, out and the LSE viewed as (B, H / pack, pack, D)
// through their strides, row r of kv head j being query head j pack + r.
cuda_detail::FwdParams packed_view(cuda_detail::FwdParams p, int64_t pack) {
  for (cuda_detail::TensorArg* t : {&p.q, &p.out}) {
    t->stride_l = t->stride_h;
    t->stride_h *= pack;
  }
  p.lse_stride_l = p.lse_stride_h;
  p.lse_stride_h *= pack;
  p.q_heads /= pack;
  p.q_len = pack;
  p.packed = cuda_detail::PackedHeads{static_cast<int32_t>(pack)};
  return p;
}

// Whether the Hopper kernel runs this call (choose_sm90 with the mask's fit).
bool use_sm90(const cuda_detail::FwdParams& p, const BlockMask& mask) {
  return cuda_detail::choose_sm90("CUDA backend", p.head_dim,
                                  cuda_detail::sm90_tile_fits(p.head_dim, mask, p.packed.any()),
                                  [&] { cuda_detail::check_tile_fit(mask, cuda_detail::sm90_tile(p.head_dim)); });
}

// The plan a call with arguments `p` on `mask` runs on `tile` (the plans
// but the plain one split rows as a PlanSplit asks; device_split_plan):
// - where its rows (mask heads x query tiles) times the call's copies (batch
//   x query heads per mask head) are fewer work units than the kernel runs
//   at a time on the current device (a call of few query tiles and heads, as
//   in decoding, would leave most multiprocessors idle), the plan that
//   splits its rows into two units per multiprocessor (min_items; the
//   pieces merge as split rows do). Two per multiprocessor ran fastest on
//   both kernels (H100, 1 x 128K keys): the sm90 kernel's one
//   CTA per multiprocessor takes two units in turn, and the sm80 kernel's
//   two CTAs take one each (as the two CTAs per multiprocessor of the sm90
//   kernel's small tile do);
// - where the plain plan splits rows, the plan that keeps whole every row no
//   longer than the call's key tiles per running CTA (whole_row_tiles,
//   rounded down to a power of two, so that calls of similar size share a
//   plan): started first, such a row ends no later than the others, and
//   needs no partial results and no merge, which cost BigBird's split
//   global rows about 4% (H100); the plain plan where that share is
//   no longer than the pieces it splits rows into anyway;
// - where it splits none and its rows are as long as each other (dense
//   attention), the plan that spreads the grid's last round over every
//   running CTA (tail_split), unless the units divide evenly;
// - the plain plan for varlen batches (whose sequences may be far shorter
//   than the mask) and for unequal rows that need no split.
cuda_detail::DeviceTilePlanView call_plan(const cuda_detail::FwdParams& p, const BlockMask& mask,
                                          cuda_detail::TileShape tile, bool sm90, cudaStream_t s) {
  const int64_t copies = p.batch * (p.q_heads / mask.num_heads());
  const int64_t rows = mask.num_heads() * pattern_math::ceil_div(mask.q_len(), tile.rows);
  const int64_t sms = cuda_detail::current_device_info().sms;
  const int64_t resident =
      sms * (sm90 ? cuda_detail::sm90_ctas_per_sm(tile) : cuda_detail::sm80_ctas_per_sm(p.head_dim));
  if (copies == 0) return cuda_detail::device_tile_plan(mask, tile, s);
  if (rows * copies >= resident) {
    const cuda_detail::DeviceTilePlanView plain = cuda_detail::device_tile_plan(mask, tile, s);
    if (p.varlen.cu_seqlens_q != nullptr) return plain;
    const int64_t key_tiles = cuda_detail::plan_key_tiles(mask, tile);
    if (plain.num_split_rows == 0) {
      if (!cuda_detail::items_of_equal_length(plain)) return plain;
      const cuda_detail::PlanSplit tail = cuda_detail::tail_split(rows, key_tiles / rows, copies, resident);
      return tail.tail_rows > 0 ? cuda_detail::device_split_plan(mask, tile, tail, s) : plain;
    }
    cuda_detail::PlanSplit whole;
    whole.whole_row_tiles = 1;
    while (2 * whole.whole_row_tiles <= key_tiles * copies / resident) whole.whole_row_tiles *= 2;
    if (whole.whole_row_tiles <= cuda_detail::split_piece_tiles(key_tiles, rows)) return plain;
    return cuda_detail::device_split_plan(mask, tile, whole, s);
  }
  // A tile's rows with queries (positions x packed heads): few of them make short pieces pay.
  cuda_detail::PlanSplit fill;
  fill.min_items = pattern_math::ceil_div(2 * sms, copies);
  fill.min_piece_tiles = cuda_detail::min_fill_piece_tiles(std::min(p.q_len, tile.rows), tile);
  return cuda_detail::device_split_plan(mask, tile, fill, s);
}

// The fused kernel with p.plan (of `tile`, made from `mask`); split rows
// write partial results to stream-ordered scratch (from a pool that keeps
// its memory: no synchronisation, capturable in a graph).
void run_fused(cuda_detail::FwdParams p, const BlockMask& mask, DType dtype, bool sm90, cuda_detail::TileShape tile,
               cudaStream_t s) {
  p.keep_bits.classes = cuda_detail::keep_bit_classes(p, mask);
  require(!p.merge_into_out || (p.plan.num_split_rows == 0 && p.lse != nullptr),
          "CUDA backend: a pass merged into out needs the rest's LSE and cannot have split rows (their combine "
          "step does not merge)");
  const auto run = [&] {
    if (sm90)
      cuda_detail::run_fwd_sm90(p, dtype, s);
    else
      cuda_detail::run_fwd_sm80(p, dtype, s);
  };
  if (p.plan.num_split_rows == 0) return run();
  const int64_t rows = tile.rows;
  const int64_t o_floats = cuda_detail::partial_o_floats(p, rows);
  const int64_t lse_floats = cuda_detail::partial_lse_floats(p, rows);
  cuda_detail::ScopedScratch scratch(static_cast<size_t>(o_floats + lse_floats) * sizeof(float), s);
  p.partial_o = static_cast<float*>(scratch.get());
  p.partial_lse = p.partial_o + o_floats;
  run();
}

// `t` from row `row` on (its data moved forward by `elem`-byte elements; strides unchanged).
cuda_detail::TensorArg from_row(cuda_detail::TensorArg t, int64_t row, int64_t elem) {
  t.data = static_cast<char*>(t.data) + row * t.stride_l * elem;
  return t;
}

// The dilated split a call on `tile` with `q_heads` query heads runs, if
// any (the mask's split is per query head). Its permuted pass merges
// each row into the rest's result as it writes it, which the pieces of a
// split row cannot; the pass's rows (one group's keys, causal or not, in
// block-diagonal groups) stay within twice the average row, so its plans do
// not split them, and a call whose permuted plan did would run without the
// permutation (cuda_prepare_mask prepares that plan too).
std::shared_ptr<const cuda_detail::DilatedSplit> call_split(const BlockMask& mask, cuda_detail::TileShape tile,
                                                            int64_t q_heads, cudaStream_t s) {
  std::shared_ptr<const cuda_detail::DilatedSplit> split = cuda_detail::dilated_split(mask, tile);
  if (!split || split->query_heads != q_heads) return nullptr;
  if (cuda_detail::device_tile_plan(split->permuted, tile, s).num_split_rows > 0) return nullptr;
  return split;
}

// A dilated term through the token permutation (cuda/plan/dilated_split.hpp):
// the rest of the pattern into out and the LSE (the caller's or scratch),
// then block-diagonal attention over the (segment, residue) groups (less the
// rest's full runs), which reads the groups' rows of q, k and v in place
// (FwdParams::residue_rate: rows step by the rate) and merges each row into
// out and the LSE as it writes it. Both passes run on the kernel the split
// was made for.
void run_dilated_split(const cuda_detail::DilatedSplit& split, const cuda_detail::FwdParams& p, DType dtype,
                       bool sm90, cuda_detail::TileShape tile, cudaStream_t s) {
  const int64_t shift = p.k_len - p.q_len;  // query row i sits at position i + shift
  // The rest's LSE when the caller has none: the permuted pass merges with it.
  const int64_t rest_lse_bytes = p.lse ? 0 : p.batch * p.q_heads * p.q_len * 4;
  cuda_detail::ScopedScratch scratch(static_cast<size_t>(rest_lse_bytes), s);

  cuda_detail::FwdParams rest = p;
  if (!p.lse) {
    rest.lse = static_cast<float*>(scratch.get());
    rest.lse_stride_b = p.q_heads * p.q_len;
    rest.lse_stride_h = p.q_len;
    rest.lse_stride_l = 1;
  }
  rest.mask = cuda_detail::device_mask(split.rest, s);
  rest.plan = cuda_detail::device_tile_plan(split.rest, tile, s);
  rest.exclude = cuda_detail::rest_exclusion(split);
  run_fused(rest, split.rest, dtype, sm90, tile, s);

  cuda_detail::FwdParams perm = p;
  perm.q_len = perm.k_len = split.num_segments * split.group;
  perm.mask = cuda_detail::device_mask(split.permuted, s);
  perm.plan = cuda_detail::device_tile_plan(split.permuted, tile, s);
  perm.exclude = cuda_detail::permuted_exclusion(split, p.q_len, p.k_len,
                                                 cuda_detail::device_table(split.rest, split.full_runs, s));
  const int64_t q_first = split.first_position - shift;  // the query row at the first regular position
  perm.q = from_row(p.q, q_first, dtype_size(dtype));
  perm.k = from_row(p.k, split.first_position, dtype_size(dtype));
  perm.v = from_row(p.v, split.first_position, dtype_size(dtype));
  perm.residue_rate = split.rate;
  perm.out = from_row(p.out, q_first, p.out_f32 ? 4 : dtype_size(dtype));
  perm.lse = rest.lse + q_first * rest.lse_stride_l;
  perm.lse_stride_b = rest.lse_stride_b;
  perm.lse_stride_h = rest.lse_stride_h;
  perm.lse_stride_l = rest.lse_stride_l;
  perm.merge_into_out = true;
  perm.rest_keeps_blocks = split.rest.num_blocks() > 0;
  run_fused(perm, split.permuted, dtype, sm90, tile, s);
}

// Runs a call with kernel arguments `p` (validated; query heads packed or
// not) on `mask`: the kernel and tile, a dilated split or the call's plan.
void run_attention(cuda_detail::FwdParams p, const BlockMask& mask, DType dtype, cudaStream_t s) {
  const bool sm90 = use_sm90(p, mask);
  if (!sm90) {
    cuda_detail::check_fwd_sm80_head_dim(p.head_dim);
    cuda_detail::check_tile_fit(mask, cuda_detail::kSm80NarrowTile);
  }
  const cuda_detail::TileShape tile = cuda_detail::call_tile(sm90, p.head_dim, mask, true, p.packed.any());
  // The split's full runs depend on the tile (dilated_split.hpp), so it is made for the chosen kernel.
  const std::shared_ptr<const cuda_detail::DilatedSplit> split = call_split(mask, tile, p.q_heads, s);
  if (split) return run_dilated_split(*split, p, dtype, sm90, tile, s);
  p.mask = cuda_detail::device_mask(mask, s);
  p.plan = call_plan(p, mask, tile, sm90, s);
  run_fused(p, mask, dtype, sm90, tile, s);
}

// Runs a validated call `p` of several query positions whose query heads
// run `pack` to a kv head as the rows of one tile (PackedHeads): q copied
// into packed rows in stream-ordered scratch, the call on them, then out and
// the LSE copied back (packed_rows.hpp).
void run_packed_copies(const cuda_detail::FwdParams& p, const BlockMask& mask, int64_t pack, DType dtype,
                       cudaStream_t s) {
  const int64_t rows = p.batch * p.q_heads * p.q_len;  // of q, out and the LSE alike
  const int64_t in_bytes = dtype_size(dtype), out_bytes = p.out_f32 ? 4 : in_bytes;
  const auto aligned = [](int64_t bytes) { return (bytes + 255) / 256 * 256; };
  const int64_t q_region = aligned(rows * p.head_dim * in_bytes), out_region = aligned(rows * p.head_dim * out_bytes);
  cuda_detail::ScopedScratch scratch(static_cast<size_t>(q_region + out_region + (p.lse ? rows * 4 : 0)), s);
  char* at = static_cast<char*>(scratch.get());

  // The packed (B, H / pack, positions x pack, D) tensors and (B, H / pack, positions x pack) LSE, contiguous.
  cuda_detail::FwdParams packed = p;
  const int64_t head_rows = p.q_len * pack;
  const auto contiguous = [&](void* data, int64_t cols) {
    return cuda_detail::TensorArg{data, p.q_heads * p.q_len * cols, head_rows * cols, cols};
  };
  packed.q = contiguous(at, p.head_dim);
  packed.out = contiguous(at + q_region, p.head_dim);
  const cuda_detail::TensorArg packed_lse = contiguous(at + q_region + out_region, 1);
  if (p.lse) {
    packed.lse = static_cast<float*>(packed_lse.data);
    packed.lse_stride_b = packed_lse.stride_b;
    packed.lse_stride_h = packed_lse.stride_h;
    packed.lse_stride_l = packed_lse.stride_l;
  }
  packed.q_heads = p.q_heads / pack;
  packed.q_len = head_rows;
  packed.packed = cuda_detail::PackedHeads{static_cast<int32_t>(pack)};

  cuda_detail::PackedRowsShape shape{p.batch, p.q_heads, pack, p.q_len, p.head_dim, in_bytes};
  cuda_detail::launch_packed_rows(p.q, packed.q, shape, cuda_detail::PackDirection::ToPacked, s);
  run_attention(packed, mask, dtype, s);
  shape.elem_bytes = out_bytes;
  cuda_detail::launch_packed_rows(p.out, packed.out, shape, cuda_detail::PackDirection::FromPacked, s);
  if (p.lse) {
    shape.cols = 1;
    shape.elem_bytes = 4;
    const cuda_detail::TensorArg caller_lse{p.lse, p.lse_stride_b, p.lse_stride_h, p.lse_stride_l};
    cuda_detail::launch_packed_rows(caller_lse, packed_lse, shape, cuda_detail::PackDirection::FromPacked, s);
  }
}

}  // namespace

bool cuda_is_device_pointer(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer leaves a non-sticky error behind; clear it
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void cuda_prepare_mask(const BlockMask& mask) {
  // The plans of each kernel that may run the mask (the head dim decides
  // between them at the call), and those of its dilated split on the tile
  // unless calls there never make one (`splits`).
  const auto prepare = [&](cuda_detail::TileShape tile, bool splits) {
    if (cuda_detail::device_tile_plan(mask, tile, nullptr).num_split_rows > 0) cuda_detail::scratch_pool();
    if (!splits) return;
    if (const auto split = cuda_detail::dilated_split(mask, tile)) {
      cuda_detail::device_tile_plan(split->rest, tile, nullptr);
      cuda_detail::device_tile_plan(split->permuted, tile, nullptr);
      cuda_detail::device_table(split->rest, split->full_runs, nullptr);
      cuda_detail::scratch_pool();
    }
  };
  // Every sm90 launch takes its work counter from the scratch pool: created
  // here whatever the kernel choice now, since the choice may change before a
  // capture.
  cuda_detail::scratch_pool();
  // The tile a call takes at each head dim where the kernel chooses between
  // tiles, for calls that make dilated splits and for varlen calls (which
  // make none).
  const auto prepare_taken = [&](bool sm90, std::initializer_list<int64_t> head_dims) {
    for (const int64_t head_dim : head_dims)
      for (const bool splits : {true, false}) {
        const cuda_detail::TileShape tile = cuda_detail::call_tile(sm90, head_dim, mask, splits);
        if (cuda_detail::tile_fits(mask, tile)) prepare(tile, splits);
      }
  };
  prepare(cuda_detail::kSm80NarrowTile, true);
  prepare_taken(false, {32, 64});
  if (cuda_kernel() != CudaKernel::Sm80 && cuda_detail::fwd_sm90_available()) {
    for (const cuda_detail::TileShape tile : {cuda_detail::kSm90WideTile, cuda_detail::kSm90NarrowTile})
      if (cuda_detail::tile_fits(mask, tile)) prepare(tile, true);
    prepare_taken(true, {64, 128});
  }
}

void cuda_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const BlockMask& mask, double scale, const TensorView* lse, void* stream) {
  validate_attention(q, k, v, out, mask, lse);
  const cuda_detail::FwdParams p = kernel_params(q, k, v, out, scale, lse);
  const auto s = static_cast<cudaStream_t>(stream);
  const int64_t pack = cuda_detail::packed_query_heads(q.seq_len(), q.heads(), k.heads(), mask);
  if (pack == 1) return run_attention(p, mask, q.dtype, s);
  if (q.seq_len() == 1) return run_attention(packed_view(p, pack), mask, q.dtype, s);
  run_packed_copies(p, mask, pack, q.dtype, s);
}

void cuda_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                           const VarlenBatch& batch, const BlockMask& mask, double scale, const TensorView* lse,
                           void* stream) {
  validate_attention_varlen(q, k, v, out, batch, mask, lse);
  cuda_detail::FwdParams p = kernel_params(q, k, v, out, scale, lse);
  require(cuda_is_device_pointer(batch.cu_seqlens_q), "CUDA backend: cu_seqlens_q must point to device memory");
  require(cuda_is_device_pointer(batch.cu_seqlens_k), "CUDA backend: cu_seqlens_k must point to device memory");
  // A packed batch without queries or keys has no product to compute (and no
  // rows for the sm90 kernel's tensor maps): the sm80 kernel writes its rows.
  const bool empty = q.seq_len() == 0 || k.seq_len() == 0;
  const bool sm90 = !empty && use_sm90(p, mask);
  if (!sm90) {
    cuda_detail::check_fwd_sm80_head_dim(p.head_dim);
    cuda_detail::check_tile_fit(mask, cuda_detail::kSm80NarrowTile);
  }
  // The grid's batch axis walks the sequences; lengths come from cu_seqlens on the device.
  p.batch = batch.num_seqs;
  p.q_len = mask.q_len();
  p.k_len = mask.k_len();
  p.varlen.cu_seqlens_q = batch.cu_seqlens_q;
  p.varlen.cu_seqlens_k = batch.cu_seqlens_k;
  p.varlen.total_q = q.seq_len();
  p.varlen.total_k = k.seq_len();
  const auto s = static_cast<cudaStream_t>(stream);
  p.mask = cuda_detail::device_mask(mask, s);
  const cuda_detail::TileShape tile = cuda_detail::call_tile(sm90, p.head_dim, mask, false);
  p.plan = call_plan(p, mask, tile, sm90, s);
  run_fused(p, mask, q.dtype, sm90, tile, s);
}

void cuda_naive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const BlockMask& mask, double scale, const TensorView* lse,
                          void* stream) {
  cuda_detail::FwdParams p = make_params(q, k, v, out, mask, scale, lse);
  const auto s = static_cast<cudaStream_t>(stream);
  p.mask = cuda_detail::device_mask(mask, s);
  cuda_detail::run_naive(p, q.dtype, s);
}

CudaDynamicAttention::CudaDynamicAttention(const SelectConfig& config, int64_t batch, int64_t q_heads,
                                           int64_t kv_heads, int64_t q_len, int64_t k_len, int64_t head_dim,
                                           double scale)
    : scale_(scale) {
  require(std::isfinite(scale) && scale > 0, "CUDA backend: scale must be finite and > 0, got ", scale);
  SelectConfig c = config;
  if (!c.scale) c.scale = scale;
  impl_ = std::make_unique<cuda_detail::DynamicAttention>(
      c, cuda_detail::SelectShape{batch, q_heads, kv_heads, q_len, k_len, head_dim});
}

CudaDynamicAttention::~CudaDynamicAttention() = default;

void CudaDynamicAttention::select(const TensorView& q, const TensorView& k, void* stream) {
  impl_->select(q, k, static_cast<cudaStream_t>(stream));
}

void CudaDynamicAttention::attend(const TensorView& q, const TensorView& k, const TensorView& v,
                                  const TensorView& out, const TensorView* lse, void* stream) {
  const cuda_detail::FwdParams p = make_params(q, k, v, out, impl_->shape_mask(), scale_, lse);
  impl_->attend(p, q.dtype, static_cast<cudaStream_t>(stream));
}

void CudaDynamicAttention::run(const TensorView& q, const TensorView& k, const TensorView& v,
                               const TensorView& out, const TensorView* lse, void* stream) {
  select(q, k, stream);
  attend(q, k, v, out, lse, stream);
}

BlockMask CudaDynamicAttention::mask(int64_t b) const { return impl_->mask(b); }

}  // namespace spattn
