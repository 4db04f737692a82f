// python/csrc/dynamic_cuda.cpp - the CUDA kernel of the spattn::dynamic_attention
// operator: the blocks chosen from q and k and attended on the device
// (spattn::CudaDynamicAttention), with no host synchronisation.
//
// A CudaDynamicAttention allocates its buffers once per (configuration,
// shape, scale, device, stream); the operator keeps the most recently used
// ones and reuses them, so a call with a known configuration and shape only
// queues kernels on PyTorch's current stream and can be captured in a CUDA
// graph. A first call inside a capture raises a ValueError saying so. Keying
// on the stream keeps calls on different streams off each other's buffers.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/library.h>

#include <cmath>
#include <list>
#include <memory>
#include <mutex>
#include <vector>

#include "attention_op.hpp"
#include "select_op_args.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "tensor_bridge.hpp"

namespace spattn::torch_bridge {
namespace {

constexpr size_t kMaxCachedSelectors = 8;

// Everything a CudaDynamicAttention is made for; absent optionals are NaN.
struct DynamicKey {
  std::vector<int64_t> ints;
  std::vector<double> reals;
  cudaStream_t stream = nullptr;

  bool operator==(const DynamicKey& o) const {
    if (ints != o.ints || stream != o.stream || reals.size() != o.reals.size()) return false;
    for (size_t n = 0; n < reals.size(); ++n)
      if (!(reals[n] == o.reals[n] || (std::isnan(reals[n]) && std::isnan(o.reals[n])))) return false;
    return true;
  }
};

DynamicKey key_of(const SelectConfig& c, const TensorView& q, const TensorView& k, double scale, int device,
                  cudaStream_t stream) {
  DynamicKey key;
  key.ints = {c.block_q,      c.block_k,          c.topk.value_or(-1), c.min_blocks, c.max_blocks,
              c.sink_blocks,  c.local_blocks,     c.causal,            c.stride,     c.per_query_head,
              q.batch(),      q.heads(),          k.heads(),           q.seq_len(),  k.seq_len(),
              q.head_dim(),   device};
  key.reals = {c.tau.value_or(NAN), c.scale.value_or(NAN), scale};
  key.stream = stream;
  return key;
}

struct CachedSelector {
  DynamicKey key;
  std::shared_ptr<CudaDynamicAttention> dynamic;
};

class DynamicCache {
 public:
  std::shared_ptr<CudaDynamicAttention> find_or_make(const SelectConfig& config, const TensorView& q,
                                                     const TensorView& k, double scale, int device,
                                                     cudaStream_t stream) {
    DynamicKey key = key_of(config, q, k, scale, device, stream);
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->key == key) {
        entries_.splice(entries_.begin(), entries_, it);
        return it->dynamic;
      }
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    require(cudaStreamIsCapturing(stream, &capture) == cudaSuccess &&
                capture == cudaStreamCaptureStatusNone,
            "dynamic_attention is called for the first time with this configuration and shape while a "
            "CUDA graph is being captured; run it once before the capture so its buffers exist");
    auto dynamic = std::make_shared<CudaDynamicAttention>(config, q.batch(), q.heads(), k.heads(), q.seq_len(),
                                                          k.seq_len(), q.head_dim(), scale);
    entries_.push_front(CachedSelector{std::move(key), dynamic});
    if (entries_.size() > kMaxCachedSelectors) entries_.pop_back();
    return dynamic;
  }

 private:
  std::mutex mutex_;
  std::list<CachedSelector> entries_;  // most recently used first
};

DynamicCache& dynamic_cache() {
  static DynamicCache cache;
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
    const std::shared_ptr<CudaDynamicAttention> dynamic = dynamic_cache().find_or_make(
        config, call.q, call.k, resolve_scale(call.options, q.size(3)), q.device().index(), stream);
    const TensorView out = view_of(call.out_tensor, "out");
    const TensorView lse = lse_view_of(call.lse_tensor);
    dynamic->run(call.q, call.k, call.v, out, &lse, stream);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("dynamic_attention", &spattn::torch_bridge::dynamic_attention_cuda);
}
