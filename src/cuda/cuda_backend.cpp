// cuda/cuda_backend.cpp - the CUDA backend's entry points (spattn/cuda.hpp):
// input checks specific to the GPU kernels, kernel arguments from the tensor
// views, the mask's device plans, and the launch.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/fwd_params.hpp"
#include "cuda/common/scratch_pool.hpp"
#include "cuda/fwd_sm80/fwd_sm80.hpp"
#include "cuda/naive/naive_attention.hpp"
#include "cuda/plan/device_plan.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"

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

cuda_detail::FwdParams make_params(const TensorView& q, const TensorView& k, const TensorView& v,
                                   const TensorView& out, const BlockMask& mask, double scale,
                                   const TensorView* lse) {
  validate_attention(q, k, v, out, mask, lse);
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
  const cuda_detail::DeviceTilePlanView plan = cuda_detail::device_tile_plan(mask, cuda_detail::kSm80Tile, nullptr);
  if (plan.num_split_rows > 0) cuda_detail::scratch_pool();
}

void cuda_attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
                    const BlockMask& mask, double scale, const TensorView* lse, void* stream) {
  cuda_detail::FwdParams p = make_params(q, k, v, out, mask, scale, lse);
  cuda_detail::check_fwd_sm80_head_dim(p.head_dim);
  cuda_detail::check_tile_fit(mask, cuda_detail::kSm80Tile);
  const auto s = static_cast<cudaStream_t>(stream);
  p.mask = cuda_detail::device_mask(mask, s);
  p.plan = cuda_detail::device_tile_plan(mask, cuda_detail::kSm80Tile, s);
  if (p.plan.num_split_rows == 0) return cuda_detail::run_fwd_sm80(p, q.dtype, s);
  // Split rows write partial results to stream-ordered scratch (from a pool
  // that keeps its memory: no synchronisation, capturable in a graph).
  const int64_t o_floats = cuda_detail::partial_o_floats(p), lse_floats = cuda_detail::partial_lse_floats(p);
  void* scratch = cuda_detail::scratch_alloc(static_cast<size_t>(o_floats + lse_floats) * sizeof(float), s);
  p.partial_o = static_cast<float*>(scratch);
  p.partial_lse = p.partial_o + o_floats;
  try {
    cuda_detail::run_fwd_sm80(p, q.dtype, s);
  } catch (...) {
    cuda_detail::scratch_free(scratch, s);
    throw;
  }
  cuda_detail::scratch_free(scratch, s);
}

void cuda_naive_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const BlockMask& mask, double scale, const TensorView* lse,
                          void* stream) {
  cuda_detail::FwdParams p = make_params(q, k, v, out, mask, scale, lse);
  const auto s = static_cast<cudaStream_t>(stream);
  p.mask = cuda_detail::device_mask(mask, s);
  cuda_detail::run_naive(p, q.dtype, s);
}

}  // namespace spattn
