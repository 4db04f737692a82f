// python/csrc/dynamic_cuda.cpp - the CUDA kernel of the spattn::dynamic_attention
// operator: the blocks chosen from q and k and attended on the device
// (spattn::CudaDynamicAttention), with no host synchronisation.
//
// A CudaDynamicAttention allocates its buffers once per (configuration,
// shape, scale, device); the operator keeps the most recently used ones and
// reuses them, so a call with a known configuration and shape only queues
// kernels on PyTorch's current stream and can be captured in a CUDA graph
// (torch.cuda.graph captures on a stream of its own, so the stream is not
// part of the key). A first call inside a capture raises a ValueError saying
// so. Calls that share buffers are ordered: outside a capture, a call on
// another stream than the entry's previous one first makes its stream wait
// for that one (an event, no host synchronisation).
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

  bool operator==(const DynamicKey& o) const {
    if (ints != o.ints || reals.size() != o.reals.size()) return false;
    for (size_t n = 0; n < reals.size(); ++n)
      if (!(reals[n] == o.reals[n] || (std::isnan(reals[n]) && std::isnan(o.reals[n])))) return false;
    return true;
  }
};

DynamicKey key_of(const SelectConfig& c, const TensorView& q, const TensorView& k, double scale, int device) {
  DynamicKey key;
  key.ints = {c.block_q,      c.block_k,          c.topk.value_or(-1), c.min_blocks, c.max_blocks,
              c.sink_blocks,  c.local_blocks,     c.causal,            c.stride,     c.per_query_head,
              q.batch(),      q.heads(),          k.heads(),           q.seq_len(),  k.seq_len(),
              q.head_dim(),   device};
  key.reals = {c.tau.value_or(NAN), c.scale.value_or(NAN), scale};
  return key;
}

// One cached CudaDynamicAttention, the stream of its latest call and an
// event to order a call on another stream after it.
struct CachedSelector {
  DynamicKey key;
  std::unique_ptr<CudaDynamicAttention> dynamic;
  cudaStream_t last_stream = nullptr;
  cudaEvent_t done = nullptr;

  CachedSelector(DynamicKey k, std::unique_ptr<CudaDynamicAttention> d, cudaStream_t stream)
      : key(std::move(k)), dynamic(std::move(d)), last_stream(stream) {
    check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~CachedSelector() {
    if (done) cudaEventDestroy(done);  // errors at teardown are ignored on purpose
  }
  CachedSelector(const CachedSelector&) = delete;
  CachedSelector& operator=(const CachedSelector&) = delete;

  static void check(cudaError_t status, const char* what) {
    require(status == cudaSuccess, what, " failed: ", cudaGetErrorString(status));
  }
};

class DynamicCache {
 public:
  // Finds or makes the CudaDynamicAttention of this call and queues the call
  // on `stream`, under the cache's lock so that calls sharing buffers are
  // queued one after the other.
  void run(const SelectConfig& config, const TensorView& q, const TensorView& k, const TensorView& v,
           const TensorView& out, const TensorView& lse, double scale, int device, cudaStream_t stream) {
    DynamicKey key = key_of(config, q, k, scale, device);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CachedSelector::check(cudaStreamIsCapturing(stream, &capture), "cudaStreamIsCapturing");
    const bool capturing = capture != cudaStreamCaptureStatusNone;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.begin();
    while (it != entries_.end() && !((*it)->key == key)) ++it;
    if (it != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, it);
    } else {
      require(!capturing,
              "dynamic_attention is called for the first time with this configuration and shape while a "
              "CUDA graph is being captured; run it once before the capture so its buffers exist");
      entries_.push_front(std::make_unique<CachedSelector>(
          std::move(key),
          std::make_unique<CudaDynamicAttention>(config, q.batch(), q.heads(), k.heads(), q.seq_len(),
                                                 k.seq_len(), q.head_dim(), scale),
          stream));
      if (entries_.size() > kMaxCachedSelectors) entries_.pop_back();
    }
    CachedSelector& entry = *entries_.front();
    if (!capturing && entry.last_stream != stream) {
      CachedSelector::check(cudaEventRecord(entry.done, entry.last_stream), "cudaEventRecord");
      CachedSelector::check(cudaStreamWaitEvent(stream, entry.done, 0), "cudaStreamWaitEvent");
    }
    entry.last_stream = stream;
    entry.dynamic->run(q, k, v, out, &lse, stream);
  }

 private:
  std::mutex mutex_;
  std::list<std::unique_ptr<CachedSelector>> entries_;  // most recently used first
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
    dynamic_cache().run(config, call.q, call.k, call.v, view_of(call.out_tensor, "out"),
                        lse_view_of(call.lse_tensor), resolve_scale(call.options, q.size(3)),
                        q.device().index(), stream);
    return call.result();
  });
}

}  // namespace
}  // namespace spattn::torch_bridge

TORCH_LIBRARY_IMPL(spattn, CUDA, m) {
  m.impl("dynamic_attention", &spattn::torch_bridge::dynamic_attention_cuda);
}
