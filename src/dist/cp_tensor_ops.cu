// dist/cp_tensor_ops.cu - the elementwise steps of context-parallel attention
// on device memory (cp_tensor_ops.hpp): one thread per element (per row for
// the merge), 64-bit offsets, the element types of the views as template
// arguments.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "cuda/common/cuda_check.hpp"
#include "cuda/common/device_buffer.hpp"
#include "dist/cp_tensor_ops.hpp"
#include "dist/lse_merge.hpp"

namespace spattn::dist::detail {

namespace {

using cuda_detail::check_cuda;
using cuda_detail::check_launch;

constexpr int kThreads = 256;

// A view's pointer, shape and strides, as a kernel reads them.
template <typename T>
struct View {
  T* data;
  int64_t shape[4], stride[4];

  __device__ T& at(int64_t i) const {  // the i-th element in (B, H, L, D) order
    int64_t off = 0;
    for (int a = 3; a >= 0; --a) {
      off += (i % shape[a]) * stride[a];
      i /= shape[a];
    }
    return data[off];
  }
};

template <typename T>
View<T> view_of(const TensorView& t) {
  View<T> v{static_cast<T*>(t.data), {}, {}};
  for (int a = 0; a < 4; ++a) {
    v.shape[a] = t.shape[a];
    v.stride[a] = t.stride[a];
  }
  return v;
}

template <typename T>
__device__ float to_float(T x) {
  return static_cast<float>(x);
}
template <>
__device__ float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
template <typename T>
__device__ T from_float(float x) {
  return static_cast<T>(x);
}
template <>
__device__ __half from_float(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __nv_bfloat16 from_float(float x) {
  return __float2bfloat16_rn(x);
}

// Calls fn(T{}) with T the element type of `dtype` (fp64 goes through fp32
// on the device: the CUDA backend takes fp16 and bf16 tensors).
template <typename Fn>
void with_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::F32: return fn(float{});
    case DType::F16: return fn(__half{});
    case DType::BF16: return fn(__nv_bfloat16{});
    case DType::F64: return fn(double{});
  }
  fail("context parallelism: unknown dtype ", static_cast<int>(dtype));
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <typename D, typename S>
__global__ void convert_kernel(View<D> dst, View<S> src, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) dst.at(i) = from_float<D>(to_float(src.at(i)));
}
template <typename T>
__global__ void fill_kernel(View<T> t, float value, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) t.at(i) = from_float<T>(value);
}

template <typename S>
__global__ void add_kernel(View<float> acc, View<S> part, int64_t n) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) acc.at(i) += to_float(part.at(i));
}

// One thread per row: its merge weights, then its head_dim elements.
__global__ void merge_kernel(View<float> acc_out, View<float> acc_lse, View<float> part_out, View<float> part_lse,
                             int64_t rows, int64_t head_dim) {
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= rows) return;
  float& lse = acc_lse.at(r);
  const LseMerge m = LseMerge::of(lse, part_lse.at(r));
  lse = m.lse;
  for (int64_t d = 0; d < head_dim; ++d) {
    float& o = acc_out.at(r * head_dim + d);
    const float p = part_out.at(r * head_dim + d);
    o = (m.w_a != 0.0f ? m.w_a * o : 0.0f) + (m.w_b != 0.0f ? m.w_b * p : 0.0f);
  }
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace

void device_convert(const TensorView& dst, const TensorView& src, void* stream) {
  const int64_t n = dst.numel();
  with_type(dst.dtype, [&](auto d) {
    with_type(src.dtype, [&](auto s) {
      using D = decltype(d);
      using S = decltype(s);
      convert_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(view_of<D>(dst), view_of<S>(src), n);
    });
  });
  check_launch("context parallelism: convert_kernel");
}

void device_fill(const TensorView& t, double value, void* stream) {
  const int64_t n = t.numel();
  with_type(t.dtype, [&](auto x) {
    using T = decltype(x);
    fill_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(view_of<T>(t), static_cast<float>(value), n);
  });
  check_launch("context parallelism: fill_kernel");
}

void device_add_into(const TensorView& acc, const TensorView& part, void* stream) {
  const int64_t n = acc.numel();
  with_type(part.dtype, [&](auto x) {
    using S = decltype(x);
    add_kernel<<<blocks_for(n), kThreads, 0, as_stream(stream)>>>(view_of<float>(acc), view_of<S>(part), n);
  });
  check_launch("context parallelism: add_kernel");
}

void device_merge_into(const TensorView& acc_out, const TensorView& acc_lse, const TensorView& part_out,
                       const TensorView& part_lse, void* stream) {
  const int64_t rows = acc_out.shape[0] * acc_out.shape[1] * acc_out.shape[2];
  merge_kernel<<<blocks_for(rows), kThreads, 0, as_stream(stream)>>>(
      view_of<float>(acc_out), view_of<float>(acc_lse), view_of<float>(part_out), view_of<float>(part_lse), rows,
      acc_out.shape[3]);
  check_launch("context parallelism: merge_kernel");
}

std::shared_ptr<void> device_allocate(int64_t bytes) {
  return std::shared_ptr<void>(cuda_detail::device_alloc(static_cast<size_t>(bytes), "context parallelism: cudaMalloc"));
}

void device_copy_bytes(void* dst, const void* src, int64_t bytes) {
  // cudaMemcpy may return before a device-to-device copy ends: wait for it,
  // so that work on any stream may read dst afterwards.
  check_cuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDefault, nullptr),
             "context parallelism: cudaMemcpyAsync");
  check_cuda(cudaStreamSynchronize(nullptr), "context parallelism: cudaStreamSynchronize");
}

int device_current() {  // -1 where no device can be used (host-only runs of a CUDA build)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // clears the error
    return -1;
  }
  return device;
}

void device_use(int device) { check_cuda(cudaSetDevice(device), "context parallelism: cudaSetDevice"); }

void device_synchronize(void* stream) {
  check_cuda(cudaStreamSynchronize(as_stream(stream)), "context parallelism: cudaStreamSynchronize");
}

}  // namespace spattn::dist::detail
