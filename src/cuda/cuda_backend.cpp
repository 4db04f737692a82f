// cuda/cuda_backend.cpp - the CUDA backend's entry points (spattn/cuda.hpp)
// and the launch of a plan (cuda_launch.hpp): input checks specific to the
// GPU kernels, kernel arguments from the tensor views, and the plan's passes
// launched with them (everything else was decided by the planner,
// plan/cuda_plan.cpp).
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <memory>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/packed_rows.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/common/rows_without_keys.hpp"
#include "cuda/common/split_combine.hpp"
#include "cuda/common/tensor_layout.hpp"
#include "cuda/cuda_launch.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/fwd_sm90/fwd_sm90.hpp"
#include "cuda/naive/naive_attention.hpp"
#include "cuda/plan/cuda_plan.hpp"
#include "cuda/plan/device_mask_copy.hpp"
#include "cuda/select/dynamic_attention.hpp"
#include "plan/plan_state.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

using cuda_detail::CudaPlan;
using cuda_detail::FwdParams;
using cuda_detail::HeadPacking;

constexpr double kLog2e = 1.4426950408889634;

// Unit stride along D, other strides and the base aligned to `align_elems` elements, device memory.
void check_layout(const TensorView& t, const char* name, int64_t align_elems) {
  cuda_detail::check_kernel_layout(t, "CUDA backend", name, align_elems);
}

using cuda_detail::tensor_arg;

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

// Scratch for the partial results of the split rows of p's plan, with
// p.partial_o and p.partial_lse pointing into it (stream-ordered, from a pool
// that keeps its memory: no synchronisation, capturable in a graph).
class PartialResults {
 public:
  PartialResults(cuda_detail::FwdParams& p, int64_t tile_rows, cudaStream_t stream)
      : scratch_(p.plan.num_split_rows == 0
                     ? 0
                     : static_cast<size_t>(cuda_detail::partial_o_floats(p, tile_rows) +
                                           cuda_detail::partial_lse_floats(p, tile_rows)) *
                           sizeof(float),
                 stream) {
    if (p.plan.num_split_rows == 0) return;
    p.partial_o = static_cast<float*>(scratch_.get());
    p.partial_lse = p.partial_o + cuda_detail::partial_o_floats(p, tile_rows);
  }

 private:
  cuda_detail::ScopedScratch scratch_;
};

// The fused kernel of the plan on a pass's arguments `p`.
void run_pass(cuda_detail::FwdParams p, const CudaPlan& plan, DType dtype, cudaStream_t s) {
  require(!p.merge_into_out || (p.plan.num_split_rows == 0 && p.lse != nullptr),
          "CUDA backend: a pass merged into out needs the rest's LSE and cannot have split rows (their combine "
          "step does not merge)");
  const PartialResults partial(p, plan.tile.rows, s);
  if (plan.sm90)
    cuda_detail::run_fwd_sm90(p, dtype, s);
  else
    cuda_detail::run_fwd_sm80(p, dtype, s);
}

// The passes of the plan on the call's arguments `call` (query heads packed
// as the plan packs them): one, or a dilated split's rest pass into out and
// the LSE (the caller's or scratch) and then its permuted pass, which merges
// each row into them as it writes it.
void run_passes(const cuda_detail::FwdParams& call, const CudaPlan& plan, DType dtype, cudaStream_t s) {
  if (plan.passes.size() == 1) return run_pass(cuda_detail::pass_params(plan.passes[0], call), plan, dtype, s);
  // The rest's LSE when the caller has none: the permuted pass merges with it.
  const int64_t rest_lse_bytes = call.lse ? 0 : call.batch * call.q_heads * call.q_len * 4;
  cuda_detail::ScopedScratch scratch(static_cast<size_t>(rest_lse_bytes), s);
  cuda_detail::FwdParams rest = cuda_detail::pass_params(plan.passes[0], call);
  if (!call.lse) {
    rest.lse = static_cast<float*>(scratch.get());
    rest.lse_stride_b = call.q_heads * call.q_len;
    rest.lse_stride_h = call.q_len;
    rest.lse_stride_l = 1;
  }
  run_pass(rest, plan, dtype, s);
  const int64_t in_bytes = dtype_size(dtype), out_bytes = call.out_f32 ? 4 : in_bytes;
  run_pass(cuda_detail::permuted_params(plan, call, rest, in_bytes, out_bytes), plan, dtype, s);
}

// Runs a validated call `p` of several query positions whose query heads
// run plan.pack to a kv head as the rows of one tile (PackedHeads): q copied
// into packed rows in stream-ordered scratch, the call on them, then out and
// the LSE copied back (packed_rows.hpp).
void run_packed_copies(const cuda_detail::FwdParams& p, const CudaPlan& plan, DType dtype, cudaStream_t s) {
  const int64_t pack = plan.pack;
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
  run_passes(packed, plan, dtype, s);
  shape.elem_bytes = out_bytes;
  cuda_detail::launch_packed_rows(p.out, packed.out, shape, cuda_detail::PackDirection::FromPacked, s);
  if (p.lse) {
    shape.cols = 1;
    shape.elem_bytes = 4;
    const cuda_detail::TensorArg caller_lse{p.lse, p.lse_stride_b, p.lse_stride_h, p.lse_stride_l};
    cuda_detail::launch_packed_rows(caller_lse, packed_lse, shape, cuda_detail::PackDirection::FromPacked, s);
  }
}

// Requires the current device to be the plan's.
void check_plan_device(const CudaPlan& plan) {
  const int device = cuda_detail::current_device();
  require(device == plan.device, "CUDA backend: the plan was made for device ", plan.device,
          " but the current device is ", device);
}

}  // namespace

int cuda_pointer_device(const void* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an unknown pointer leaves a non-sticky error behind; clear it
    return -1;
  }
  const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  return on_device ? attributes.device : -1;
}

bool cuda_is_device_pointer(const void* p) { return cuda_pointer_device(p) >= 0; }

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

namespace cuda_detail {

void launch_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                 const CudaPlan& plan, double scale, const TensorView* lse, void* stream) {
  check_plan_device(plan);
  require(!plan.passes.empty(), "CUDA backend: the plan is of an empty call (no row or no key) and launches nothing");
  const FwdParams p = kernel_params(q, k, v, out, scale, lse);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (plan.packing) {
    case HeadPacking::None: return run_passes(p, plan, q.dtype, s);
    case HeadPacking::InPlace: return run_passes(packed_view(p, plan.pack), plan, q.dtype, s);
    case HeadPacking::Copies: return run_packed_copies(p, plan, q.dtype, s);
  }
}

void launch_varlen_plan(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                        const VarlenBatch& batch, const CudaPlan& plan, double scale, const TensorView* lse,
                        void* stream) {
  check_plan_device(plan);
  FwdParams p = kernel_params(q, k, v, out, scale, lse);
  require(cuda_is_device_pointer(batch.cu_seqlens_q), "CUDA backend: cu_seqlens_q must point to device memory");
  require(cuda_is_device_pointer(batch.cu_seqlens_k), "CUDA backend: cu_seqlens_k must point to device memory");
  // A packed batch without queries has no row to write; one with queries
  // but no keys breaks Lq(b) <= Lk(b) for some sequence.
  if (q.seq_len() == 0) return;
  require(k.seq_len() > 0, "varlen: k holds no rows but q holds ", q.seq_len(),
          "; each sequence needs Lq <= Lk (its queries are its last Lq positions)");
  if (plan.passes.empty()) return;  // a mask of no positions: every sequence is empty
  // The grid's batch axis walks the sequences; lengths come from cu_seqlens on the device.
  const BlockMaskView shape = plan.passes.front().plan.blocks;
  p.batch = batch.num_seqs;
  p.q_len = shape.q_len;
  p.k_len = shape.k_len;
  p.varlen.cu_seqlens_q = batch.cu_seqlens_q;
  p.varlen.cu_seqlens_k = batch.cu_seqlens_k;
  p.varlen.total_q = q.seq_len();
  p.varlen.total_k = k.seq_len();
  run_passes(p, plan, q.dtype, static_cast<cudaStream_t>(stream));
}

}  // namespace cuda_detail

void cuda_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const BlockMask& mask, double scale, const TensorView* lse, void* stream) {
  validate_attention(q, k, v, out, mask, lse);
  if (out.empty()) return;  // B, Hq or Lq is 0: no row to write
  if (k.empty())            // no key to read: every row is 0 with LSE -inf
    return cuda_detail::write_rows_without_keys(out, lse, static_cast<cudaStream_t>(stream));
  const Plan plan = detail::cached_plan(mask, call_shape(q, k), Backend::Cuda, q.data, false, stream);
  cuda_detail::launch_plan(q, k, v, out, *plan.state().cuda, scale, lse, stream);
}

void cuda_attention_varlen(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                           const VarlenBatch& batch, const BlockMask& mask, double scale, const TensorView* lse,
                           void* stream) {
  validate_attention_varlen(q, k, v, out, batch, mask, lse);
  if (out.empty()) return;  // no query rows, or no query heads
  const Plan plan = detail::cached_plan(mask, varlen_call_shape(q, k, batch, mask.q_len()), Backend::Cuda, q.data,
                                       false, stream);
  cuda_detail::launch_varlen_plan(q, k, v, out, batch, *plan.state().cuda, scale, lse, stream);
}

void cuda_naive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const BlockMask& mask, double scale, const TensorView* lse,
                          void* stream) {
  cuda_detail::FwdParams p = make_params(q, k, v, out, mask, scale, lse);
  const auto s = static_cast<cudaStream_t>(stream);
  p.mask = cuda_detail::shared_device_copy(mask, s)->view();
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
