// python/csrc/dynamic_cuda.cpp - the CUDA kernel of the spattn::dynamic_attention
// operator: the blocks chosen from q and k and attended on the device
// (spattn::CudaDynamicAttention), with no host synchronisation.
//
// A CudaDynamicAttention allocates its buffers once per (configuration,
// shape, scale, device); the operator keeps the most recently used ones
// (device_object_cache.hpp), so a call with a known configuration and shape
// only queues kernels on PyTorch's current stream and can be captured in a
// CUDA graph. A first call inside a capture raises a ValueError saying so.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <memory>

#include "attention_op.hpp"
#include "device_object_cache.hpp"
#include "select_op_args.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

DeviceObjectCache<CudaDynamicAttention>& dynamic_cache() {
  static DeviceObjectCache<CudaDynamicAttention> cache("dynamic_attention");
  return cache;
}

std::tuple<at::Tensor, at::Tensor> dynamic_attention_cuda(
    const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t block_q, int64_t block_k,
    std::optional<int64_t> topk, std::optional<double> tau, int64_t min_blocks, int64_t max_blocks,
    int64_t sink_blocks, int64_t local_blocks, bool causal, int64_t stride, bool per_query_head,
    std::optional<double> scale) {
  return run_with_value_errors([&] {
    const c10::cuda::CUDAGuard guard(q.device());
    AttentionCall call(q, k, v, scale);
    if (call.empty()) return call.result();
    const SelectConfig config = select_config_of(block_q, block_k, topk, tau, min_blocks, max_blocks,
                                                 sink_blocks, local_blocks, causal, stride, per_query_head,
                                                 scale);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
    const double attention_scale = resolve_scale(call.options, q.size(3));
    const TensorView out = view_of(call.out_tensor, "out"), lse = lse_view_of(call.lse_tensor);
    dynamic_cache().run(
        selector_key(config, call.q, call.k, attention_scale, q.device().index()), stream,
        [&] {
          return std::make_unique<CudaDynamicAttention>(config, call.q.batch(), call.q.heads(), call.k.heads(),
                                                        call.q.seq_len(), call.k.seq_len(), call.q.head_dim(),
                                                        attention_scale);
        },
        [&](CudaDynamicAttention& dynamic) { dynamic.run(call.q, call.k, call.v, out, &lse, stream); });
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("dynamic_attention", &spattn::torch_bridge::dynamic_attention_cuda);
}
