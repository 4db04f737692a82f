// python/csrc/attention_cuda.cpp - the CUDA kernels of the spattn::attention,
// spattn::attention_backward, spattn::attention_varlen and
// spattn::attention_with_kvcache operators (compiled when the library is
// built with CUDA, SPATTN_WITH_CUDA).
//
// Both find the host BlockMask of the packed mask tensor (mask_registry.hpp:
// its first use copies the tensor to the host, one synchronisation) and run
// the CUDA backend on PyTorch's current stream with the plan of the call's
// shape, which the mask caches: the shape's first call makes it (uploads and
// waits); later calls only launch kernels. A CUDA graph can therefore capture
// any call after the first of its shape and mask; a first use inside a
// capture raises a ValueError saying so.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>

#include "attention_kvcache_op.hpp"
#include "attention_op.hpp"
#include "attention_varlen_op.hpp"
#include "mask_registry.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

// Raises unless `backend` may run CUDA tensors ("auto" or "cuda").
void require_cuda_backend(c10::string_view backend) {
  const Backend requested = parse_backend(std::string(backend));
  require(requested == Backend::Auto || requested == Backend::Cuda, "backend '", backend_name(requested),
          "' needs CPU tensors, got CUDA tensors");
}

// The registered mask of a call on `device` (its packed tensor must lie
// there, like q): decoding a new one on the host cannot happen in a capture.
std::shared_ptr<const BlockMask> call_mask(const std::optional<at::Tensor>& mask, int64_t q_len, int64_t k_len,
                                           const at::Device& device, cudaStream_t stream) {
  if (mask)
    TORCH_CHECK_VALUE(mask->device() == device, "the mask must be on ", device, " like q, got ", mask->device());
  return registered_mask(mask, q_len, k_len, [stream] {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    require(cudaStreamIsCapturing(stream, &capture) == cudaSuccess && capture == cudaStreamCaptureStatusNone,
            "this mask is used for the first time while a CUDA graph is being captured; run the "
            "attention once with it before the capture so its plan exists");
  });
}

std::tuple<at::Tensor, at::Tensor> attention_cuda(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                  const std::optional<at::Tensor>& mask, std::optional<double> scale,
                                                  c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    AttentionCall call(q, k, v, scale);
    if (call.empty()) return call.result();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    call.run(*call_mask(mask, q.size(2), k.size(2), q.device(), stream), Backend::Cuda, stream);
    return call.result();
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> attention_backward_cuda(
    const at::Tensor& d_out, const at::Tensor& d_lse, const at::Tensor& q, const at::Tensor& k,
    const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    const std::shared_ptr<const BlockMask> registered = call_mask(mask, q.size(2), k.size(2), q.device(), stream);
    return attention_gradients(d_out, d_lse, q, k, v, out, lse, *registered, scale, Backend::Cuda, stream);
  });
}

std::tuple<at::Tensor, at::Tensor> attention_varlen_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& cu_seqlens_q,
    const at::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k, const std::optional<at::Tensor>& mask,
    std::optional<double> scale, c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    VarlenCall call(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale);
    if (call.empty()) return call.result();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    const int64_t dense_len = varlen_dense_length(max_seqlen_q, max_seqlen_k);
    const std::shared_ptr<const BlockMask> registered = call_mask(mask, dense_len, dense_len, q.device(), stream);
    call.options.backend = Backend::Cuda;
    call.options.stream = stream;
    attention_varlen(call.q, call.k, call.v, call.out, call.batch, *registered, call.options, &call.lse);
    return call.result();
  });
}

std::tuple<at::Tensor, at::Tensor> attention_with_kvcache_cuda(
    const at::Tensor& q, at::Tensor& k_cache, at::Tensor& v_cache, const std::optional<at::Tensor>& k,
    const std::optional<at::Tensor>& v, const at::Tensor& cache_seqlens, const std::optional<at::Tensor>& page_table,
    const std::optional<at::Tensor>& mask, const std::optional<at::Tensor>& pages,
    const std::optional<at::Tensor>& page_min, const std::optional<at::Tensor>& page_max, std::optional<double> scale,
    c10::string_view backend) {
  return run_with_value_errors([&] {
    require_cuda_backend(backend);
    const c10::cuda::CUDAGuard guard(q.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    KvCacheCall call(q, k_cache, v_cache, k, v, cache_seqlens, page_table, pages, page_min, page_max, scale);
    call.options.backend = Backend::Cuda;
    call.options.stream = stream;
    const std::shared_ptr<const BlockMask> registered =
        mask ? call_mask(mask, q.size(1), q.size(1), q.device(), stream) : std::shared_ptr<const BlockMask>();
    call.run(registered.get());
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("attention", &spattn::torch_bridge::attention_cuda);
  m.impl("attention_backward", &spattn::torch_bridge::attention_backward_cuda);
  m.impl("attention_varlen", &spattn::torch_bridge::attention_varlen_cuda);
  m.impl("attention_with_kvcache", &spattn::torch_bridge::attention_with_kvcache_cuda);
}
